package lsm

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
)

// TestModelOnOffloadFS runs the model test on offloadfs over a memory
// volume, the file system the engine runs on at a target, through its
// vfs adapter.
func TestModelOnOffloadFS(t *testing.T) {
	ctx := context.Background()
	dev := testfs.Device(t, "mem:256MiB")
	testfs.Format(t, dev)
	fsys := testfs.Mount(t, dev, offloadfs.Options{Logger: quietLogger()})
	opts := smallOptions()
	vf := fsys.VFS()
	d, err := Open(vf, "db", opts)
	if err != nil {
		t.Fatal(err)
	}
	r := &modelRun{t: t, rng: rand.New(rand.NewPCG(11, 12)), fs: vf, opts: opts, d: d, m: model{}, nkeys: 300}
	steps := 2000
	if testing.Short() {
		steps = 500
	}
	for i := 0; i < steps; i++ {
		r.step()
	}
	r.closeSnapshots()
	r.check(r.d.Compact(ctx, []byte(""), []byte("z")))
	r.checkAll()
	t.Logf("%s", fmt.Sprint(r.d.Metrics().Levels[1].Tables, " L1 tables on offloadfs"))
	r.check(r.d.Close())
}

// pageDev is an in-memory offloadfs.Device whose writes become durable
// only at Flush, and which can crash at its n-th write or flush: that
// operation and all after it fail. crashImage returns what the disk could
// hold afterwards: the durable pages plus a random prefix of the writes
// since the last flush, in order.
type pageDev struct {
	mu      sync.Mutex
	size    int64
	durable map[int64][]byte // 4 KiB pages; absent pages are zero
	cur     map[int64][]byte
	pending []pendingWrite
	left    int // operations before the crash; < 0: never
	crashed bool
}

type pendingWrite struct {
	off  int64
	data []byte
}

const devPage = 4096

func newPageDev(size int64) *pageDev {
	return &pageDev{size: size, durable: map[int64][]byte{}, cur: map[int64][]byte{}, left: -1}
}

func writePages(pages map[int64][]byte, b []byte, off int64) {
	for len(b) > 0 {
		i, in := off/devPage, off%devPage
		p := pages[i]
		if p == nil {
			p = make([]byte, devPage)
			pages[i] = p
		}
		n := copy(p[in:], b)
		b, off = b[n:], off+int64(n)
	}
}

func (d *pageDev) op() error {
	if d.crashed {
		return errCrashed
	}
	if d.left == 0 {
		d.crashed = true
		return errCrashed
	}
	if d.left > 0 {
		d.left--
	}
	return nil
}

func (d *pageDev) ReadAt(b []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i, in := off/devPage, off%devPage
		var c int
		if p := d.cur[i]; p != nil {
			c = copy(b, p[in:])
		} else {
			c = copy(b, make([]byte, devPage-in))
		}
		b, off = b[c:], off+int64(c)
	}
	return n, nil
}

func (d *pageDev) WriteAt(b []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.op(); err != nil {
		return 0, err
	}
	writePages(d.cur, b, off)
	d.pending = append(d.pending, pendingWrite{off, slices.Clone(b)})
	return len(b), nil
}

func (d *pageDev) Size() int64    { return d.size }
func (d *pageDev) BlockSize() int { return 512 }

func (d *pageDev) Flush(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.op(); err != nil {
		return err
	}
	for _, w := range d.pending {
		writePages(d.durable, w.data, w.off)
	}
	d.pending = nil
	return nil
}

func (d *pageDev) crashAfter(n int) {
	d.mu.Lock()
	d.left = n
	d.mu.Unlock()
}

func (d *pageDev) crashImage(rng *rand.Rand) *pageDev {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := newPageDev(d.size)
	for i, p := range d.durable {
		n.durable[i] = slices.Clone(p)
		n.cur[i] = slices.Clone(p)
	}
	for _, w := range d.pending[:rng.IntN(len(d.pending)+1)] {
		writePages(n.durable, w.data, w.off)
		writePages(n.cur, w.data, w.off)
	}
	return n
}

func mountDev(t *testing.T, dev *pageDev) (*offloadfs.FS, error) {
	t.Helper()
	return offloadfs.Mount(context.Background(), dev, offloadfs.Options{Logger: quietLogger()})
}

// TestCrashOnOffloadFS runs the crash workload on offloadfs over a device
// that crashes at a chosen write or flush, recovers offloadfs from the
// crash image, then the store, and checks it holds a prefix of the
// workload with every acknowledged synced batch.
func TestCrashOnOffloadFS(t *testing.T) {
	opts := smallOptions()
	opts.MemTableSize = 4 << 10
	opts.TargetFileSize = 4 << 10
	opts.LBaseMaxBytes = 8 << 10
	ops := crashWorkload(2, 80)
	const size = 64 << 20

	fresh := func() *pageDev {
		dev := newPageDev(size)
		if err := offloadfs.Mkfs(context.Background(), dev, offloadfs.MkfsOptions{}); err != nil {
			t.Fatal(err)
		}
		dev.Flush(context.Background())
		return dev
	}
	// Count the device operations of an uncrashed run.
	dev := fresh()
	dev.crashAfter(1 << 30)
	fsys, err := mountDev(t, dev)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(fsys.VFS(), "db", opts)
	if err != nil {
		t.Fatal(err)
	}
	if done, _ := runCrashWorkload(d, ops); done != len(ops) {
		t.Fatalf("uncrashed run stopped at %d", done)
	}
	d.Close()
	fsys.Close()
	dev.mu.Lock()
	total := 1<<30 - dev.left
	dev.mu.Unlock()

	step := 3 // every third device write or flush: a third of the race-detector time of all
	if testing.Short() {
		step = 20
	}
	points, crashes := 0, 0
	rng := rand.New(rand.NewPCG(8, 9))
	for n := 0; n < total; n += step {
		points++
		dev := fresh()
		dev.crashAfter(n)
		done, lastSynced := 0, -1
		if fsys, err := mountDev(t, dev); err == nil {
			if d, err := Open(fsys.VFS(), "db", opts); err == nil {
				done, lastSynced = runCrashWorkload(d, ops)
				d.Close()
			}
			fsys.Close()
		}
		dev.mu.Lock()
		if dev.crashed {
			crashes++
		}
		dev.mu.Unlock()
		img := dev.crashImage(rng)
		fsys2, err := mountDev(t, img)
		if err != nil {
			t.Fatalf("crash at device op %d: offloadfs does not mount: %v", n, err)
		}
		d2, err := Open(fsys2.VFS(), "db", opts)
		if err != nil {
			t.Fatalf("crash at device op %d: reopen: %v", n, err)
		}
		got := dbState(t, d2)
		ok := len(got) == 0 && lastSynced < 0
		for p := max(lastSynced, 0); p <= min(done, len(ops)-1) && !ok; p++ {
			ok = maps.Equal(got, ops[p].model)
		}
		if !ok {
			t.Fatalf("crash at device op %d (workload op %d, last synced %d): recovered state is no prefix's", n, done, lastSynced)
		}
		d2.Close()
		fsys2.Close()
	}
	if crashes < points*9/10 {
		t.Fatalf("only %d of %d runs crashed", crashes, points)
	}
	t.Logf("%d crash points over %d device operations", crashes, total)
}

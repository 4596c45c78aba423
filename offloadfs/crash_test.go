package offloadfs_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
)

// diskImage is a disk's contents: a base image shared between copies and
// never written, and the 4 KiB pages that differ from it. Copies cost
// only the pages written, which keeps thousands of crash images cheap.
type diskImage struct {
	base  []byte
	pages map[int64][]byte
}

const pageSize = 4096

func imageOf(b []byte) *diskImage { return &diskImage{base: b, pages: map[int64][]byte{}} }

func (d *diskImage) clone() *diskImage {
	c := &diskImage{base: d.base, pages: make(map[int64][]byte, len(d.pages))}
	for i, p := range d.pages {
		c.pages[i] = append([]byte(nil), p...)
	}
	return c
}

func (d *diskImage) readAt(b []byte, off int64) {
	for len(b) > 0 {
		i, in := off/pageSize, off%pageSize
		src := d.pages[i]
		if src == nil {
			src = d.base[i*pageSize : (i+1)*pageSize]
		}
		n := copy(b, src[in:])
		b, off = b[n:], off+int64(n)
	}
}

func (d *diskImage) writeAt(b []byte, off int64) {
	for len(b) > 0 {
		i, in := off/pageSize, off%pageSize
		p := d.pages[i]
		if p == nil {
			p = append([]byte(nil), d.base[i*pageSize:(i+1)*pageSize]...)
			d.pages[i] = p
		}
		n := copy(p[in:], b)
		b, off = b[n:], off+int64(n)
	}
}

// bytes returns the whole image as one slice.
func (d *diskImage) bytes() []byte {
	b := make([]byte, len(d.base))
	d.readAt(b, 0)
	return b
}

// crashDev is an in-memory device that remembers which writes a flush
// has made durable, and "crashes" at its crashAt'th write: that write and
// everything after fail. image then builds what a disk could hold after
// such a crash.
type crashDev struct {
	mu      sync.Mutex
	durable *diskImage // contents as of the last flush
	cur     *diskImage // contents as reads see them
	pending []pwrite   // writes since the last flush, in order
	writes  int
	crashAt int // -1: never
	crashed bool
	torn    pwrite // the write that was in flight at the crash
}

type pwrite struct {
	off  int64
	data []byte
}

var errCrash = errors.New("crashdev: crashed")

func newCrashDev(img *diskImage, crashAt int) *crashDev {
	return &crashDev{durable: img.clone(), cur: img.clone(), crashAt: crashAt}
}

func (d *crashDev) Size() int64    { return int64(len(d.cur.base)) }
func (d *crashDev) BlockSize() int { return 512 }

// usable refuses an I/O of n bytes at off after the crash or outside
// the device; d.mu is held.
func (d *crashDev) usable(op string, off int64, n int) error {
	if d.crashed {
		return errCrash
	}
	if off < 0 || off+int64(n) > d.Size() {
		return fmt.Errorf("crashdev: %s [%d, +%d) out of range", op, off, n)
	}
	return nil
}

func (d *crashDev) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable("read", off, len(p)); err != nil {
		return 0, err
	}
	d.cur.readAt(p, off)
	return len(p), nil
}

func (d *crashDev) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable("write", off, len(p)); err != nil {
		return 0, err
	}
	w := pwrite{off, append([]byte(nil), p...)}
	if d.writes == d.crashAt {
		d.crashed, d.torn = true, w
		return 0, errCrash
	}
	d.writes++
	d.cur.writeAt(p, off)
	d.pending = append(d.pending, w)
	return len(p), nil
}

func (d *crashDev) Flush(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.crashed {
		return errCrash
	}
	for _, w := range d.pending {
		d.durable.writeAt(w.data, w.off)
	}
	d.pending = nil
	return nil
}

// Crash modes: what of the writes since the last flush reached the disk.
type crashMode int

const (
	crashCut       crashMode = iota // all completed writes; the one in flight not
	crashTorn                       // all completed writes, and part of the one in flight
	crashUnflushed                  // nothing since the last flush
	crashReorder                    // any subset of them, some torn
	numCrashModes
)

var crashModeNames = [...]string{"cut", "torn", "unflushed", "reorder"}

// tear applies a prefix of whole 512-byte sectors of w (sectors are
// atomic on real disks).
func tear(img *diskImage, w pwrite, r *rand.Rand) {
	n := r.IntN(len(w.data)/512+1) * 512
	img.writeAt(w.data[:min(n, len(w.data))], w.off)
}

func (d *crashDev) image(mode crashMode, r *rand.Rand) *diskImage {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch mode {
	case crashCut:
		return d.cur.clone()
	case crashTorn:
		img := d.cur.clone()
		if d.crashed {
			tear(img, d.torn, r)
		}
		return img
	case crashUnflushed:
		return d.durable.clone()
	}
	img := d.durable.clone()
	ws := append([]pwrite(nil), d.pending...)
	if d.crashed {
		ws = append(ws, d.torn)
	}
	r.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
	for _, w := range ws {
		switch r.IntN(3) {
		case 0:
			img.writeAt(w.data, w.off)
		case 1:
			tear(img, w, r)
		}
	}
	return img
}

// crashRun is a workload run up to a crash: the model's states in order,
// the first of them that a crash may fall back to, and the writes made
// in place (which make file contents after a crash undetermined).
type crashRun struct {
	snaps  []*model
	lb     int
	writes []wrange
}

// exact reports which files must have their contents exactly: those no
// operation since snapshot lb rewrote in place.
func (cr *crashRun) exact() func(id int) bool {
	maxSize := map[int]int64{}
	for _, s := range cr.snaps[cr.lb:] {
		for _, f := range s.files {
			maxSize[f.id] = max(maxSize[f.id], int64(len(f.data)))
		}
	}
	inplace := map[int]bool{}
	for _, w := range cr.writes {
		if w.id != 0 && w.from < maxSize[w.id] {
			inplace[w.id] = true
		}
	}
	return func(id int) bool { return !inplace[id] }
}

// runUntilCrash runs ops on a file system on dev until the device
// crashes (or the ops end).
func runUntilCrash(t *testing.T, dev *crashDev, ops []op) *crashRun {
	return runFrom(t, dev, newModel(), ops)
}

// runFrom is runUntilCrash on a device whose file system holds m already.
func runFrom(t *testing.T, dev *crashDev, m *model, ops []op) *crashRun {
	ctx := context.Background()
	m = m.clone()
	cr := &crashRun{snaps: []*model{m.clone()}}
	fsys, err := offloadfs.Mount(ctx, dev, testfs.Quiet())
	if err != nil {
		if dev.crashed {
			return cr
		}
		t.Fatalf("mount: %v", err)
	}
	seq := fsys.Usage().CommitSeq
	for i, o := range ops {
		before := len(cr.snaps) - 1
		var err error
		if o.kind == opRemount {
			if err = fsys.Close(); err == nil {
				fsys, err = offloadfs.Mount(ctx, dev, testfs.Quiet())
			}
		} else {
			// Create is two steps, each of which may commit: the file
			// is created (or truncated) empty, then written.
			if o.kind == opCreate {
				empty := o
				empty.data = nil
				mc := m.clone()
				if mc.apply(&empty) == eNone {
					cr.snaps = append(cr.snaps, mc)
				}
			}
			want := m.apply(&o)
			cr.writes = append(cr.writes, o.write)
			err = applyFS(fsys, o)
			if !dev.crashed && classify(err) != want {
				t.Fatalf("op %d %v: got %s, want %s", i, o, classify(err), want)
			}
		}
		cr.snaps = append(cr.snaps, m.clone())
		if dev.crashed {
			return cr
		}
		if err != nil && o.kind == opRemount {
			t.Fatalf("op %d remount: %v", i, err)
		}
		// A commit completed during this operation: states before it
		// are gone for good.
		if s := fsys.Usage().CommitSeq; s != seq {
			// The commit may have come first in the operation, so
			// keep its writes.
			seq, cr.lb = s, before
			cr.writes = append(cr.writes[:0], o.write)
		}
	}
	if err := fsys.Close(); err != nil && !dev.crashed {
		t.Fatalf("close: %v", err)
	}
	if !dev.crashed {
		cr.lb = len(cr.snaps) - 1
	}
	return cr
}

// checkRecovery mounts a crash image and checks it: fsck is clean and the
// tree is one of the states the workload went through since its last
// durable commit, with exact contents for files not rewritten in place.
func checkRecovery(t *testing.T, img *diskImage, cr *crashRun, what string) {
	ctx := context.Background()
	dev := newCrashDev(img, -1)
	fsys, err := offloadfs.Mount(ctx, dev, testfs.Quiet())
	if err != nil {
		t.Fatalf("%s: mount after crash: %v", what, err)
	}
	defer fsys.Close()
	checkFsck(t, fsys, what)
	got, err := readTree(fsys)
	if err != nil {
		t.Fatalf("%s: reading the tree: %v", what, err)
	}
	exact := cr.exact()
	for _, s := range cr.snaps[cr.lb:] {
		if diffTree(got, s, exact) == "" {
			return
		}
	}
	t.Fatalf("%s: recovered tree matches no state since the last commit (%d states); against the oldest: %s; against the newest: %s",
		what, len(cr.snaps)-cr.lb, diffTree(got, cr.snaps[cr.lb], exact), diffTree(got, cr.snaps[len(cr.snaps)-1], exact))
}

// formatted returns a freshly formatted image of size bytes.
func formatted(t testing.TB, size int) *diskImage {
	return formattedWith(t, size, offloadfs.MkfsOptions{})
}

func formattedWith(t testing.TB, size int, opts offloadfs.MkfsOptions) *diskImage {
	dev := newCrashDev(imageOf(make([]byte, size)), -1)
	if err := offloadfs.Mkfs(context.Background(), dev, opts); err != nil {
		t.Fatal(err)
	}
	return imageOf(dev.cur.bytes())
}

// genWorkload returns a reproducible random workload.
func genWorkload(seed uint64, n int) []op {
	r := rand.New(rand.NewPCG(seed, 42))
	m := newModel()
	ops := make([]op, n)
	for i := range ops {
		ops[i] = genOp(r, m, true)
		o := ops[i]
		m.apply(&o)
	}
	return ops
}

// syncLoop is a workload of many small commits, which wraps the journal.
func syncLoop(n int) []op {
	var ops []op
	for i := range n {
		p := fmt.Sprintf("d%d/f%d", i%3, i)
		if i < 3 {
			ops = append(ops, op{kind: opMkdir, p: fmt.Sprintf("d%d", i)})
		}
		ops = append(ops, op{kind: opCreate, p: p, data: []byte(p)}, op{kind: opSync})
		if i >= 6 && i%2 == 0 {
			ops = append(ops, op{kind: opRemove, p: fmt.Sprintf("d%d/f%d", (i-6)%3, i-6)})
		}
		if i%5 == 0 {
			ops = append(ops, op{kind: opAppend, p: p, data: make([]byte, 5000)}, op{kind: opRename, p: p, q: p + "r"})
		}
	}
	return ops
}

// churn is a workload on a nearly full device, so freed blocks are soon
// reused: it catches blocks handed out before the transaction freeing
// them commits.
func churn(n int) []op {
	data := func(i int) []byte {
		b := make([]byte, 300000+i*1000)
		for k := range b {
			b[k] = byte(i + k/4096)
		}
		return b
	}
	var ops []op
	for i := range 6 {
		ops = append(ops, op{kind: opCreate, p: fmt.Sprintf("f%d", i), data: data(i)})
	}
	ops = append(ops, op{kind: opSync})
	for i := 6; i < n; i++ {
		ops = append(ops,
			op{kind: opRemove, p: fmt.Sprintf("f%d", i-6)},
			op{kind: opCreate, p: fmt.Sprintf("f%d", i), data: data(i)},
			op{kind: opWriteAt, p: fmt.Sprintf("f%d", i-3), off: 5000, data: data(i)[:9000]})
		if i%3 == 0 {
			ops = append(ops, op{kind: opSync})
		}
	}
	return ops
}

// TestCrash crashes workloads at many points, in every crash mode, and
// checks what a remount finds.
func TestCrash(t *testing.T) {
	// Every write of every workload is a crash point, except under the
	// race detector or -short, which sample (OFFLOADFS_CRASH_ALL=1 still
	// tests them all).
	points := 1 << 30
	if (testing.Short() || raceEnabled) && os.Getenv("OFFLOADFS_CRASH_ALL") == "" {
		points = 25
	}
	for _, tc := range []struct {
		name string
		size int
		mkfs offloadfs.MkfsOptions
		ops  []op
	}{
		{"random1", 8 << 20, offloadfs.MkfsOptions{}, genWorkload(1, 150)},
		{"random2", 8 << 20, offloadfs.MkfsOptions{}, genWorkload(2, 150)},
		{"syncloop", 8 << 20, offloadfs.MkfsOptions{}, syncLoop(60)},
		{"churn", 4 << 20, offloadfs.MkfsOptions{}, churn(20)},
		// Small blocks: transactions span several descriptors.
		{"random-512", 4 << 20, offloadfs.MkfsOptions{BlockSize: 512}, genWorkload(3, 100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := formattedWith(t, tc.size, tc.mkfs)
			// A dry run counts the writes.
			dry := newCrashDev(base, -1)
			runUntilCrash(t, dry, tc.ops)
			total := dry.writes
			r := rand.New(rand.NewPCG(uint64(total), 7))
			step := max(1, total/points)
			tested := 0
			for k := r.IntN(step); k < total; k += step {
				dev := newCrashDev(base, k)
				cr := runUntilCrash(t, dev, tc.ops)
				if !dev.crashed {
					t.Fatalf("crash point %d of %d never reached", k, total)
				}
				for mode := range numCrashModes {
					checkRecovery(t, dev.image(mode, r), cr, fmt.Sprintf("crash at write %d/%d (%s)", k, total, crashModeNames[mode]))
				}
				tested++
			}
			t.Logf("%d writes, %d crash points, %d modes each", total, tested, numCrashModes)
		})
	}
}

// TestCrashRecoveredIsUsable checks that a file system recovered from a
// crash takes new work and survives a clean remount.
func TestCrashRecoveredIsUsable(t *testing.T) {
	ctx := context.Background()
	base := formatted(t, 8<<20)
	ops := genWorkload(3, 60)
	dry := newCrashDev(base, -1)
	runUntilCrash(t, dry, ops)
	dev := newCrashDev(base, dry.writes/2)
	runUntilCrash(t, dev, ops)
	img := dev.image(crashReorder, rand.New(rand.NewPCG(1, 1)))
	dev = newCrashDev(img, -1)
	fsys, err := offloadfs.Mount(ctx, dev, testfs.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	before, err := readTree(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if err := fsys.MkdirAll("after/crash"); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.Create("after/crash/file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 300000)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}
	fsys, err = offloadfs.Mount(ctx, dev, testfs.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	checkFsck(t, fsys, "after remount")
	after, err := readTree(fsys)
	if err != nil {
		t.Fatal(err)
	}
	before.dirs["after"], before.dirs["after/crash"] = true, true
	before.files["after/crash/file"] = &mfile{data: make([]byte, 300000)}
	if d := diffTree(after, before, nil); d != "" {
		t.Fatal(d)
	}
}

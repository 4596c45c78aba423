package rubble

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

// newFS makes and mounts an offloadfs on a real in-memory volume.
func newFS(t testing.TB) (*offloadfs.FS, offloadfs.Device) {
	t.Helper()
	ctx := context.Background()
	v, err := volume.Open("mem:64MiB")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	dev := offloadfs.VolumeDevice(v)
	if err := offloadfs.Mkfs(ctx, dev, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	fsys, err := offloadfs.Mount(ctx, dev, offloadfs.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	return fsys, dev
}

func TestSlotPool(t *testing.T) {
	ctx := context.Background()
	fsys, dev := newFS(t)
	const n, size = 8, 2<<20 + 64<<10 // a little over a 2 MiB table
	p, err := MakePool(ctx, fsys, n, size)
	if err != nil {
		t.Fatal(err)
	}
	if p.SlotSize() != size || len(p.Slots()) != n {
		t.Fatalf("pool %d slots of %d", len(p.Slots()), p.SlotSize())
	}
	if err := p.Check(ctx); err != nil {
		t.Fatalf("fresh pool: %v", err)
	}
	// A second pool on the same volume is refused, and nothing is lost.
	if _, err := MakePool(ctx, fsys, 1, size); err == nil {
		t.Fatal("second pool accepted")
	}
	if err := p.Check(ctx); err != nil {
		t.Fatalf("after refused second pool: %v", err)
	}
	// Writing a slot's bytes (as a shipped table does) moves no block.
	f, err := fsys.OpenFile(p.slotName(3), os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(strings.Repeat("t", 100000)), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := p.Check(ctx); err != nil {
		t.Fatalf("after a write into a slot: %v", err)
	}
	// The pool survives a remount with every slot where it was.
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}
	fsys2, err := offloadfs.Mount(ctx, dev, offloadfs.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys2.Close()
	q, err := OpenPool(ctx, fsys2)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range q.Slots() {
		if !slices.Equal(s.Extents.Extents, p.Slots()[i].Extents.Extents) {
			t.Fatalf("slot %d moved across a remount", i)
		}
	}
	if err := q.Check(ctx); err != nil {
		t.Fatalf("after remount: %v", err)
	}
}

func TestSlotPoolRefusesDamage(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(fsys *offloadfs.FS) error
		want   string
	}{
		{"missing slot", func(fsys *offloadfs.FS) error { return fsys.Remove(SlotDir + "/slot-1") }, "slot 1 missing"},
		{"stray file", func(fsys *offloadfs.FS) error {
			f, err := fsys.Create(SlotDir + "/junk")
			if err == nil {
				f.Close()
			}
			return err
		}, "stray file"},
		{"shrunk slot", func(fsys *offloadfs.FS) error {
			f, err := fsys.OpenFile(SlotDir+"/slot-2", os.O_RDWR)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(4096)
		}, "slot 2 is 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys, _ := newFS(t)
			p, err := MakePool(ctx, fsys, 4, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.damage(fsys); err != nil {
				t.Fatal(err)
			}
			if err := p.Check(ctx); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want %q, got %v", tc.want, err)
			}
		})
	}
	fsys, _ := newFS(t)
	for _, bad := range [][2]int64{{0, 1 << 20}, {4, 0}, {-1, 1}} {
		if _, err := MakePool(ctx, fsys, int(bad[0]), bad[1]); err == nil {
			t.Errorf("pool of %d slots of %d accepted", bad[0], bad[1])
		}
	}
}

package iocheck

import (
	"context"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/volume"
)

// dev adapts a volume to Device, with hooks to break it on purpose.
type dev struct {
	volume.Volume
	misdirect   int64 // writes of this length land one block later
	ignoreZero  bool  // WriteZeroes does nothing
	corruptRead int64 // reads covering this offset return one flipped byte (-1: never)
	zeroDealloc bool
}

func (d *dev) WriteAt(p []byte, off int64) (int, error) {
	if int64(len(p)) == d.misdirect {
		off += int64(d.BlockSize())
	}
	return d.Volume.WriteAt(p, off)
}

func (d *dev) ReadAt(p []byte, off int64) (int, error) {
	n, err := d.Volume.ReadAt(p, off)
	if d.corruptRead >= off && d.corruptRead < off+int64(len(p)) {
		p[d.corruptRead-off] ^= 0x40
	}
	return n, err
}

func (d *dev) Flush(context.Context) error { return d.Volume.Flush() }
func (d *dev) WriteZeroes(_ context.Context, off, n int64) error {
	if d.ignoreZero {
		return nil
	}
	return d.Volume.WriteZeroes(off, n)
}
func (d *dev) Deallocate(_ context.Context, off, n int64) error { return d.Volume.Deallocate(off, n) }
func (d *dev) DeallocatedReadsZero() bool                       { return d.zeroDealloc }

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dev      func(v volume.Volume) *dev
		failStep string // "" means every step passes
	}{
		{"healthy device", func(v volume.Volume) *dev { return &dev{Volume: v, corruptRead: -1, zeroDealloc: true} }, ""},
		{"healthy, deallocate not promised zero", func(v volume.Volume) *dev { return &dev{Volume: v, corruptRead: -1} }, ""},
		{"misdirected 64 KiB writes", func(v volume.Volume) *dev { return &dev{Volume: v, misdirect: 64 << 10, corruptRead: -1} }, "aligned 64 KiB"},
		{"write zeroes ignored", func(v volume.Volume) *dev { return &dev{Volume: v, ignoreZero: true, corruptRead: -1} }, "write zeroes"},
		{"one byte corrupted on read", func(v volume.Volume) *dev { return &dev{Volume: v, corruptRead: 3<<20 + 17} }, "sequential sweep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := volume.Open("mem:16MiB")
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			rep := Run(context.Background(), tc.dev(v), Options{Size: 8 << 20, Seed: 42})
			var failed []string
			for _, s := range rep.Steps {
				if s.Err != "" {
					failed = append(failed, s.Name+": "+s.Err)
				}
			}
			if tc.failStep == "" {
				if !rep.OK || len(failed) > 0 {
					t.Fatalf("healthy device failed: %v", failed)
				}
				return
			}
			if rep.OK {
				t.Fatal("a broken device passed")
			}
			hit := false
			for _, f := range failed {
				hit = hit || strings.HasPrefix(f, tc.failStep)
			}
			if !hit {
				t.Fatalf("want step %q to fail, failures: %v", tc.failStep, failed)
			}
		})
	}
}

func TestPatternIsPositional(t *testing.T) {
	a := make([]byte, 100)
	fill(a, 1000, 7)
	b := make([]byte, 37)
	fill(b, 1013, 7)
	if string(a[13:50]) != string(b) {
		t.Fatal("the pattern depends on where a read starts, not only on the offset")
	}
	c := make([]byte, 100)
	fill(c, 1000, 8)
	if string(a) == string(c) {
		t.Fatal("different seeds gave the same pattern")
	}
}

package lsm

import (
	"context"
	"fmt"
	"testing"

	"github.com/nearstore/nearstore/sandbox"
)

// BenchmarkLSMGetDrive runs lsm_get's one step per Get in process, in each
// runtime, the way the target's executor drives it (DriveSteps, the block
// copied into the instance's data buffer), on a table shaped like the
// bench's: 24-byte keys, 400-byte values, 4 KiB blocks, 16 keys per
// restart. ns/op is per Get, acquire and release included.
func BenchmarkLSMGetDrive(b *testing.B) {
	opts := smallOptions()
	opts.DisableAutomaticCompactions = true
	opts.MemTableSize = 8 << 20
	opts.TargetFileSize = 64 << 20
	opts.Table = TableOptions{BlockSize: 4096, BlockRestartInterval: 16}
	d, err := Open(newMemFS(), "db", opts)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	const n = 4000
	key := func(i int) string { return fmt.Sprintf("user%020d", uint64(i)*2654435761%1000000007) }
	val := make([]byte, 400)
	for i := range n {
		if err := d.Set([]byte(key(i)), val, nil); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := d.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	snap := d.visibleSeq.Load()
	type get struct {
		scratch []byte
		file    []byte
		off     uint64
		len     uint64
	}
	var gets []get
	files := map[uint64][]byte{}
	for i := 0; i < n; i += 7 {
		rs, err := d.loadReadState()
		if err != nil {
			b.Fatal(err)
		}
		s := d.split(rs, []byte(key(i)), snap)
		d.releaseReadState(rs)
		if s.done || len(s.plan) != 1 {
			b.Fatalf("%s: done %v, %d tables", key(i), s.done, len(s.plan))
		}
		f := files[s.plan[0].meta.FileNum]
		if f == nil {
			r := s.plan[0].h.reader()
			f = make([]byte, r.size)
			if _, err := r.f.ReadAt(f, 0); err != nil {
				b.Fatal(err)
			}
			files[s.plan[0].meta.FileNum] = f
		}
		ps := &pushState{valueCap: lgValueMax}
		scratch, start, err := ps.request(s.plan, []byte(key(i)), snap, false)
		if err != nil {
			b.Fatal(err)
		}
		gets = append(gets, get{scratch, f, start.Offset, uint64(start.Length)})
		s.release()
	}
	for _, m := range lsmGetModules(b) {
		b.Run(m.Kind().String(), func(b *testing.B) {
			i := 0
			for b.Loop() {
				g := &gets[i%len(gets)]
				i++
				inst, err := m.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				copy(inst.Scratch(), g.scratch)
				read := func(next []sandbox.Next) (uint32, uint64, int, error) {
					buf, err := inst.Data(int(next[0].Len))
					if err != nil {
						return 0, 0, 0, err
					}
					copy(buf, g.file[next[0].Offset:next[0].Offset+next[0].Len])
					return next[0].File, next[0].Offset, int(next[0].Len), nil
				}
				first := []sandbox.Next{{Offset: g.off, Len: g.len}}
				if sd, ok := inst.(sandbox.StepDriver); ok {
					err = sd.DriveSteps(ctx, first, read)
				} else {
					for {
						f, off, n, rerr := read(first)
						if rerr != nil {
							b.Fatal(rerr)
						}
						done, more, serr := inst.Step(ctx, f, off, n)
						if err = serr; err != nil || done {
							break
						}
						first = more
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				if inst.ResultLen() != lgOffValue+400 {
					b.Fatalf("a %d-byte result", inst.ResultLen())
				}
				inst.Release()
			}
		})
	}
}

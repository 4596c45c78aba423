package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/internal/testruntime"
	"github.com/nearstore/nearstore/sandbox"
)

// lsmGetModules loads lsm_get into both runtimes.
func lsmGetModules(t testing.TB) []sandbox.Module {
	t.Helper()
	ctx := context.Background()
	var mods []sandbox.Module
	for _, rt := range testruntime.Both(t) {
		b, err := functions.Module("lsm_get", rt.Kind())
		if err != nil {
			t.Fatal(err)
		}
		// A generous clock: the race detector slows the eBPF interpreter
		// down a lot, and this is about semantics.
		m, err := rt.Load(ctx, b, sandbox.Limits{Time: 20 * time.Second})
		if err != nil {
			t.Fatalf("loading lsm_get (%v): %v", rt.Kind(), err)
		}
		if !m.HasPushdown() || m.HasCompute() {
			t.Fatalf("%v: entries: pushdown %v, compute %v", rt.Kind(), m.HasPushdown(), m.HasCompute())
		}
		mods = append(mods, m)
	}
	t.Cleanup(func() {
		for _, m := range mods {
			_ = m.Close(ctx)
		}
	})
	return mods
}

// runLocal runs an lsm_get request for plan on m over the tables' bytes,
// as an executor does, and returns the result (the part of the final
// scratch the function returns) and the steps taken.
func runLocal(t *testing.T, m sandbox.Module, ps *pushState, plan []planTable, key []byte, snap SeqNum, fromIndex bool) ([]byte, int) {
	t.Helper()
	ctx := context.Background()
	files := make([][]byte, len(plan))
	for i, p := range plan {
		r := p.h.reader()
		files[i] = make([]byte, r.size)
		if _, err := r.f.ReadAt(files[i], 0); err != nil {
			t.Fatal(err)
		}
	}
	scratch, start, err := ps.request(plan, key, snap, fromIndex)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Release()
	copy(inst.Scratch(), scratch)
	next := sandbox.Next{File: start.File, Offset: start.Offset, Len: uint64(start.Length)}
	for steps := 1; steps <= 64; steps++ {
		f := files[next.File]
		if next.Offset+next.Len > uint64(len(f)) {
			t.Fatalf("%q: read [%d, +%d) past the end of table %d", key, next.Offset, next.Len, next.File)
		}
		buf, err := inst.Data(int(next.Len))
		if err != nil {
			t.Fatal(err)
		}
		copy(buf, f[next.Offset:next.Offset+next.Len])
		done, nx, err := inst.Step(ctx, next.File, next.Offset, int(next.Len))
		if err != nil {
			t.Fatalf("%q: step %d (%v): %v", key, steps, m.Kind(), err)
		}
		if done {
			return bytes.Clone(inst.Scratch()[:inst.ResultLen()]), steps
		}
		if len(nx) != 1 {
			t.Fatalf("%q: step %d asked for %v", key, steps, nx)
		}
		next = nx[0]
	}
	t.Fatalf("%q: more than 64 steps", key)
	return nil, 0
}

// TestLSMGetOnTables runs lsm_get, in both runtimes, on tables kv/lsm
// wrote, for every key's on-disk plan — starting each table at its data
// block (what the host knows from its index) and at its top-level index
// block — and checks its answer against the model and the table the host's
// ordinary reads settle at.
func TestLSMGetOnTables(t *testing.T) {
	d, model := splitDB(t)
	snap := d.visibleSeq.Load()
	mods := lsmGetModules(t)
	stride := 3
	if testing.Short() {
		stride = 17
	}
	var checked, multi int
	for _, m := range mods {
		for _, fromIndex := range []bool{false, true} {
			for i := 0; i < 2100; i += stride {
				k := fmt.Sprintf("k%04d", i)
				s := d.splitNow(t, k)
				if s.done {
					continue
				}
				ps := &pushState{valueCap: lgValueMax}
				out, steps := runLocal(t, m, ps, s.plan, []byte(k), snap, fromIndex)
				status, at, val, err := ps.decode(out, s.plan)
				if err != nil {
					t.Fatalf("%v %s: %v", m.Kind(), k, err)
				}
				// Where the ordinary path settles.
				wantAt := -1
				for j, p := range s.plan {
					if _, _, found, _ := p.h.reader().get([]byte(k), snap); found {
						wantAt = j
						break
					}
				}
				var got []byte
				switch status {
				case lgAbsent:
					err = ErrNotFound
					at = -1
				case lgSet, lgDel:
					got, err = answer(val)
				default:
					t.Fatalf("%v %s: status %d", m.Kind(), k, status)
				}
				// Only the header and a SET's value come back.
				wantLen := lgOffValue
				if status == lgSet {
					wantLen += int(binary.LittleEndian.Uint32(out[40:]))
				}
				if len(out) != wantLen {
					t.Fatalf("%v %s: a %d-byte result for status %d, want %d", m.Kind(), k, len(out), status, wantLen)
				}
				if at != wantAt {
					t.Fatalf("%v %s (from index %v): settled at plan table %d, the host at %d", m.Kind(), k, fromIndex, at, wantAt)
				}
				perTable := 1
				if fromIndex {
					perTable = 3
				}
				if tables := max(at+1, len(s.plan)*b2i(at < 0)); steps != perTable*tables {
					t.Fatalf("%v %s: %d steps for %d tables", m.Kind(), k, steps, tables)
				}
				want, ok := model[k]
				if ok != (err == nil) || (ok && string(got) != want) || (!ok && !errors.Is(err, ErrNotFound)) {
					t.Fatalf("%v %s: got %q, %v; want %q (present %v)", m.Kind(), k, got, err, want, ok)
				}
				if len(s.plan) > 1 {
					multi++
				}
				checked++
				s.release()
			}
		}
	}
	if checked < 100 || multi == 0 {
		t.Fatalf("checked %d plans, %d of several tables", checked, multi)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestLSMGetLongValue checks that a value longer than the capacity comes
// back as its data block's handle, which the host then reads.
func TestLSMGetLongValue(t *testing.T) {
	d, model := splitDB(t)
	snap := d.visibleSeq.Load()
	for _, m := range lsmGetModules(t) {
		n := 0
		for i := 0; i < 2000 && n < 20; i += 13 {
			k := fmt.Sprintf("k%04d", i)
			want, ok := model[k]
			s := d.splitNow(t, k)
			if s.done || !ok {
				s.release()
				continue
			}
			ps := &pushState{valueCap: 3} // every value is longer
			out, _ := runLocal(t, m, ps, s.plan, []byte(k), snap, false)
			status, at, _, err := ps.decode(out, s.plan)
			if err != nil || status != lgSetBlock {
				t.Fatalf("%v %s: status %d, %v", m.Kind(), k, status, err)
			}
			le := binary.LittleEndian
			if h := (blockHandle{le.Uint64(out[48:]), le.Uint32(out[56:])}); h != s.plan[at].data {
				t.Fatalf("%v %s: block %+v, plan says %+v", m.Kind(), k, h, s.plan[at].data)
			}
			if got, err := runPlainly(s.plan[at:at+1], []byte(k), snap); err != nil || string(got) != want {
				t.Fatalf("%v %s: %q, %v; want %q", m.Kind(), k, got, err, want)
			}
			n++
			s.release()
		}
		if n == 0 {
			t.Fatal("no key checked")
		}
	}
}

// TestLSMGetBadBlocks checks lsm_get's answers to blocks it must not
// trust: malformed ones are NS_EINVAL, keys longer than its key buffer
// LSM_E2BIG, in both runtimes.
func TestLSMGetBadBlocks(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 600)
	var bb blockBuilder
	bb.restartInterval = 4
	bb.add(makeInternalKey([]byte("a"), 5, KindSet), []byte("1"))
	bb.add(makeInternalKey(long, 5, KindSet), []byte("2"))
	longBlock := bytes.Clone(bb.finish())
	bb.add(makeInternalKey([]byte("a"), 5, KindSet), []byte("1"))
	bb.add(makeInternalKey([]byte("b"), 5, KindSet), []byte("2"))
	good := bytes.Clone(bb.finish())
	badCount := bytes.Clone(good)
	binary.LittleEndian.PutUint32(badCount[len(badCount)-4:], 1000)
	badEntry := bytes.Clone(good)
	badEntry[1] = 200 // unshared past the entries
	shortKey := []byte{0, 2, 0, 'a', 'b', 0, 0, 0, 0, 1, 0, 0, 0}
	cases := []struct {
		name  string
		block []byte
		key   string
		code  int32
	}{
		{"restart count", badCount, "b", functions.EINVAL},
		{"entry length", badEntry, "b", functions.EINVAL},
		{"short key", shortKey, "b", functions.EINVAL},
		{"long key", longBlock, "y", -7},
		{"tiny block", []byte{1, 2, 3}, "b", functions.EINVAL},
	}
	ctx := context.Background()
	for _, m := range lsmGetModules(t) {
		for _, c := range cases {
			inst, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ps := &pushState{valueCap: lgValueMax}
			plan := []planTable{{data: blockHandle{0, uint32(len(c.block))}}}
			scratch, _, err := ps.request(plan, []byte(c.key), 10, false)
			if err != nil {
				t.Fatal(err)
			}
			copy(inst.Scratch(), scratch)
			buf, _ := inst.Data(len(c.block))
			copy(buf, c.block)
			_, _, err = inst.Step(ctx, 0, 0, len(c.block))
			var fe *sandbox.FunctionError
			if !errors.As(err, &fe) || fe.Code != c.code {
				t.Errorf("%v %s: %v, want code %d", m.Kind(), c.name, err, c.code)
			}
			inst.Release()
		}
		// And the good block answers.
		inst, _ := m.Acquire(ctx)
		ps := &pushState{valueCap: lgValueMax}
		plan := []planTable{{data: blockHandle{0, uint32(len(good))}}}
		scratch, _, _ := ps.request(plan, []byte("b"), 10, false)
		copy(inst.Scratch(), scratch)
		buf, _ := inst.Data(len(good))
		copy(buf, good)
		done, _, err := inst.Step(ctx, 0, 0, len(good))
		if err != nil || !done {
			t.Fatalf("%v good block: done %v, %v", m.Kind(), done, err)
		}
		st, _, val, err := ps.decode(inst.Scratch(), plan)
		if err != nil || st != lgSet {
			t.Fatalf("%v good block: status %d, %v", m.Kind(), st, err)
		}
		if v, err := answer(val); err != nil || string(v) != "2" {
			t.Fatalf("%v good block: %q, %v", m.Kind(), v, err)
		}
		inst.Release()
	}
}

// FuzzPushdownResult feeds lsm_get results that did not come from lsm_get
// to the host's decoder: it must return an error or a consistent answer,
// never panic.
func FuzzPushdownResult(f *testing.F) {
	ps := &pushState{valueCap: lgValueMax}
	ok := make([]byte, sandbox.ScratchSize)
	binary.LittleEndian.PutUint32(ok[4:], lgSet)
	binary.LittleEndian.PutUint64(ok[32:], 5<<8|uint64(KindSet))
	binary.LittleEndian.PutUint32(ok[40:], 3)
	copy(ok[lgOffValue:], "abc")
	f.Add(ok, uint8(1))
	del := bytes.Clone(ok)
	binary.LittleEndian.PutUint32(del[4:], lgDel)
	binary.LittleEndian.PutUint64(del[32:], 5<<8|uint64(KindDelete))
	f.Add(del, uint8(2))
	f.Add(ok[:lgOffValue+1], uint8(1))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, out []byte, n uint8) {
		plan := make([]planTable, int(n%lgMaxTables)+1)
		status, at, val, err := ps.decode(out, plan)
		if err != nil {
			return
		}
		switch status {
		case lgAbsent:
		case lgSetBlock:
			if at >= len(plan) {
				t.Fatalf("settled at %d of %d", at, len(plan))
			}
		case lgSet, lgDel:
			if at >= len(plan) {
				t.Fatalf("settled at %d of %d", at, len(plan))
			}
			v, err := answer(val)
			if status == lgDel && !errors.Is(err, ErrNotFound) {
				t.Fatalf("DEL answered %q, %v", v, err)
			}
		default:
			t.Fatalf("status %d accepted", status)
		}
	})
}

// BenchmarkLSMGetStep measures what one lsm_get step costs the storage
// node in each runtime, beyond the device read: taking an instance,
// loading the request and a 4 KiB data block of 400-byte values, running
// the step that finds the key and copies its value out, and giving the
// instance back.
func BenchmarkLSMGetStep(b *testing.B) {
	opts := smallOptions()
	opts.Table = TableOptions{}
	opts.DisableAutomaticCompactions = true
	d, err := Open(newMemFS(), "db", opts)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	val := bytes.Repeat([]byte("v"), 400)
	key := func(i int) string { return fmt.Sprintf("user%020d", i*7919%1000) }
	for i := range 1000 {
		if err := d.Set([]byte(key(i)), val, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	k := key(500)
	rs, err := d.loadReadState()
	if err != nil {
		b.Fatal(err)
	}
	s := d.split(rs, []byte(k), d.visibleSeq.Load())
	d.releaseReadState(rs)
	defer s.release()
	if len(s.plan) != 1 {
		b.Fatalf("plan of %d tables", len(s.plan))
	}
	ps := &pushState{valueCap: lgValueMax}
	scratch, start, err := ps.request(s.plan, []byte(k), d.visibleSeq.Load(), false)
	if err != nil {
		b.Fatal(err)
	}
	block := make([]byte, start.Length)
	if _, err := s.plan[0].h.reader().f.ReadAt(block, int64(start.Offset)); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, m := range lsmGetModules(b) {
		b.Run(m.Kind().String(), func(b *testing.B) {
			for b.Loop() {
				inst, err := m.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				copy(inst.Scratch(), scratch)
				buf, err := inst.Data(len(block))
				if err != nil {
					b.Fatal(err)
				}
				copy(buf, block)
				done, _, err := inst.Step(ctx, 0, start.Offset, len(block))
				if err != nil || !done || binary.LittleEndian.Uint32(inst.Scratch()[4:]) != lgSet {
					b.Fatalf("step: done %v, %v, status %d", done, err, binary.LittleEndian.Uint32(inst.Scratch()[4:]))
				}
				inst.Release()
			}
		})
	}
}

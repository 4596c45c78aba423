package nsfunc

import (
	"encoding/binary"
	"testing"
)

func TestPushdownCtx(t *testing.T) {
	le := binary.LittleEndian
	ctxp, datap, scrp := alloc(ctxSize), alloc(64), alloc(ScratchSize)
	defer func() { free(ctxp); free(datap); free(scrp) }()
	raw := lookup(ctxp, ctxSize)
	le.PutUint32(raw[offData:], datap)
	le.PutUint32(raw[offDataLen:], 32)
	le.PutUint32(raw[offScratch:], scrp)
	le.PutUint32(raw[offCurFile:], 3)
	le.PutUint64(raw[offCurAddr:], 4096)
	lookup(datap, 64)[0] = 7

	ret := Pushdown(ctxp, func(c *Ctx) int32 {
		if len(c.Data) != 32 || c.Data[0] != 7 || len(c.Scratch) != ScratchSize {
			t.Errorf("data %d bytes (first %d), scratch %d", len(c.Data), c.Data[0], len(c.Scratch))
		}
		if c.CurFile != 3 || c.CurAddr != 4096 {
			t.Errorf("cur = %d/%d", c.CurFile, c.CurAddr)
		}
		c.Scratch[0] = 9
		for i := 0; i < MaxFanout; i++ {
			if !c.Next(1, uint64(i)*100, 10) {
				t.Fatalf("Next %d refused", i)
			}
		}
		if c.Next(1, 0, 10) {
			t.Error("Next past MaxFanout accepted")
		}
		return 5
	})
	if ret != 5 {
		t.Fatalf("ret = %d", ret)
	}
	if lookup(scrp, 1)[0] != 9 {
		t.Error("scratch write lost")
	}
	if got := le.Uint64(raw[offNextAddr+8*15:]); got != 1500 {
		t.Errorf("next_addr[15] = %d", got)
	}
	if got := le.Uint64(raw[offSize+8*2:]); got != 10 {
		t.Errorf("size[2] = %d", got)
	}
	if got := le.Uint32(raw[offNextFile+4*7:]); got != 1 {
		t.Errorf("next_file[7] = %d", got)
	}
	Pushdown(ctxp, func(c *Ctx) int32 { c.Done(); return 0 })
	if le.Uint32(raw[offDone:]) != 1 {
		t.Error("Done not set")
	}

	// A context whose pointers are not ns_alloc buffers is refused.
	le.PutUint32(raw[offData:], 12345)
	if ret := Pushdown(ctxp, func(*Ctx) int32 { return 0 }); ret != EINVAL {
		t.Errorf("bad data pointer: ret %d, want EINVAL", ret)
	}
}

func TestCompute(t *testing.T) {
	in, out := alloc(100), alloc(8)
	defer func() { free(in); free(out) }()
	ret := Compute(in, 100, out, 8, func(i, o []byte) int32 {
		if len(i) != 100 || len(o) != 8 {
			t.Errorf("len in %d out %d", len(i), len(o))
		}
		return int32(copy(o, "abc"))
	})
	if ret != 3 || string(lookup(out, 3)) != "abc" {
		t.Fatalf("ret %d out %q", ret, lookup(out, 3))
	}
	// A length past the buffer is refused; a pointer inside one is found.
	if ret := Compute(in, 101, out, 8, nil); ret != EINVAL {
		t.Errorf("in_len past buffer: ret %d", ret)
	}
	if b := lookup(in+10, 90); len(b) != 90 {
		t.Errorf("interior lookup: %d bytes", len(b))
	}
	if b := lookup(in+10, 91); b != nil {
		t.Error("interior lookup past the end accepted")
	}
}

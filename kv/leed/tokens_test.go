package leed

import (
	"context"
	"testing"
	"time"
)

func TestCostCurve(t *testing.T) {
	c, capacity := CurveFor(DeviceModel{ReadLatency: 90 * time.Microsecond, WriteLatency: 20 * time.Microsecond, IOPS: 700e3, Bandwidth: 3.2e9})
	if got := c.Cost(false, 4096); got != 1 {
		t.Fatalf("4 KiB read costs %v tokens, want 1 (the unit)", got)
	}
	// 700K IOPS is 1.43 µs a command; 3.2 GB/s moves 128 KiB in 41 µs.
	if got := c.Cost(false, 128<<10); got < 28 || got > 29 {
		t.Fatalf("128 KiB read costs %v tokens, want about 28.7", got)
	}
	if got := c.Cost(true, 6000); got <= 1 || got >= c.Cost(true, 8192) {
		t.Fatalf("6000-byte write costs %v, not between 4 and 8 KiB's", got)
	}
	if got := c.Cost(true, 4<<20); got <= c.Cost(true, 1<<20) {
		t.Fatalf("4 MiB write costs %v, no more than 1 MiB's", got)
	}
	// 700K IOPS × 90 µs: 63 reads in flight keep the device busy.
	if capacity < 62 || capacity > 64 {
		t.Fatalf("capacity %v, want 63", capacity)
	}
}

func TestEngineAdmits(t *testing.T) {
	e, err := NewEngine(CostCurve{{Size: 4096, Read: 1, Write: 2}}, 3)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, _ := e.Acquire(ctx, true, 4096)  // 2
	b, _ := e.Acquire(ctx, false, 4096) // 3
	if e.Credits() != 0 {
		t.Fatalf("credits %d at capacity", e.Credits())
	}
	done := make(chan Token)
	go func() {
		tok, err := e.Acquire(ctx, true, 4096)
		if err != nil {
			t.Error(err)
		}
		done <- tok
	}()
	select {
	case <-done:
		t.Fatal("a write beyond capacity was admitted")
	case <-time.After(20 * time.Millisecond):
	}
	e.Release(a)
	c := <-done
	e.Release(b)
	e.Release(c)
	if e.Credits() != 3 {
		t.Fatalf("credits %d when idle, want 3", e.Credits())
	}
	// An I/O costlier than the capacity runs alone.
	big, err := e.Acquire(ctx, true, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	e.Release(big)
	cctx, cancel := context.WithCancel(ctx)
	x, _ := e.Acquire(ctx, true, 4096)
	y, _ := e.Acquire(ctx, false, 4096)
	cancel()
	if _, err := e.Acquire(cctx, true, 4096); err == nil {
		t.Fatal("acquire with a cancelled context succeeded at capacity")
	}
	e.Release(x)
	e.Release(y)
}

func TestStoreUnderEngine(t *testing.T) {
	c, capacity := CurveFor(DeviceModel{ReadLatency: 90 * time.Microsecond, IOPS: 700e3, Bandwidth: 3.2e9})
	e, _ := NewEngine(c, capacity)
	o := smallOpts()
	o.Engine = e
	s := open(t, newMemDev(4<<20), o)
	ctx := context.Background()
	if _, err := s.Put(ctx, []byte("k"), []byte("v"), PutAny); err != nil {
		t.Fatal(err)
	}
	if v, _, err := s.Get(ctx, []byte("k")); err != nil || string(v) != "v" {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Admitted < 4 || st.InFlight != 0 {
		t.Fatalf("engine %+v", st)
	}
}

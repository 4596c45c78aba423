package lsm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestWriteStallAndRelease fills L0 to the stop threshold with automatic
// compactions off: writes must stall (a write with a deadline fails with
// it, and the stall shows in Metrics), and a manual compaction must
// release them.
func TestWriteStallAndRelease(t *testing.T) {
	opts := smallOptions()
	opts.DisableAutomaticCompactions = true
	opts.L0StopWritesThreshold = 3
	opts.L0SlowdownWritesThreshold = 2
	opts.MemTableStopWritesThreshold = 2
	d := mustOpen(t, newMemFS(), opts)
	defer d.Close()
	val := make([]byte, 1000)
	stalled := false
	for i := 0; i < 10000 && !stalled; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		b := NewBatch()
		b.Set([]byte(fmt.Sprintf("k%06d", i)), val)
		err := d.Apply(ctx, b, nil)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			stalled = true
		case err != nil:
			t.Fatal(err)
		}
	}
	if !stalled {
		t.Fatal("writes never stalled")
	}
	m := d.Metrics()
	if m.Levels[0].Tables < opts.L0StopWritesThreshold || m.WriteStalls.Count == 0 || m.WriteSlowdowns.Count == 0 {
		t.Fatalf("stalled without the metrics showing why:\n%s", m)
	}
	if err := d.Compact(context.Background(), []byte("k"), []byte("l")); err != nil {
		t.Fatal(err)
	}
	if err := d.Set([]byte("after"), []byte("stall"), nil); err != nil {
		t.Fatal(err)
	}
	expectGet(t, d, "after", "stall")
	if m := d.Metrics(); m.Levels[0].Tables != 0 {
		t.Fatalf("L0 not emptied by Compact:\n%s", m)
	}
}

// TestResident checks the block cache's no-I/O residency query follows
// reads.
func TestResident(t *testing.T) {
	d := mustOpen(t, newMemFS(), smallOptions())
	defer d.Close()
	for i := 0; i < 200; i++ {
		if err := d.Set([]byte(fmt.Sprintf("k%04d", i)), make([]byte, 100), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	f := d.current.Levels[0][0]
	d.mu.Unlock()
	h, err := d.tc.get(f.FileNum, f.Size)
	if err != nil {
		t.Fatal(err)
	}
	r := h.reader()
	defer h.release()
	key := []byte("k0150")
	blk := r.index[r.blockIndex(searchKey(key, MaxSeqNum))].h.offset
	if d.Resident(f.FileNum, blk) {
		t.Fatal("block resident before any read")
	}
	expectGet(t, d, "k0150", string(make([]byte, 100)))
	if !d.Resident(f.FileNum, blk) {
		t.Fatal("block not resident after a Get read it")
	}
	if d.Resident(f.FileNum, blk+1) {
		t.Fatal("a non-block offset is resident")
	}
}

// TestPendingCompactionBytesStall: with levels far over their targets and
// compactions off, writes stall on the hard pending-bytes limit.
func TestPendingCompactionBytesStall(t *testing.T) {
	opts := smallOptions()
	opts.DisableAutomaticCompactions = true
	opts.LBaseMaxBytes = 1 << 10
	opts.SoftPendingCompactionBytes = 1
	opts.HardPendingCompactionBytes = 16 << 10
	opts.MemTableStopWritesThreshold = 2
	d := mustOpen(t, newMemFS(), opts)
	defer d.Close()
	val := make([]byte, 1000)
	for i := 0; i < 100; i++ {
		if err := d.Set([]byte(fmt.Sprintf("k%06d", i)), val, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Move it all into L1, far over its 1 KiB target.
	if err := d.Compact(context.Background(), []byte("k"), []byte("l")); err != nil {
		t.Fatal(err)
	}
	if m := d.Metrics(); m.PendingCompactionBytes < opts.HardPendingCompactionBytes {
		t.Fatalf("pending %d bytes, want over %d", m.PendingCompactionBytes, opts.HardPendingCompactionBytes)
	}
	stalled := false
	for i := 0; i < 1000 && !stalled; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		b := NewBatch()
		b.Set([]byte(fmt.Sprintf("m%06d", i)), val)
		err := d.Apply(ctx, b, nil)
		cancel()
		stalled = errors.Is(err, context.DeadlineExceeded)
		if err != nil && !stalled {
			t.Fatal(err)
		}
	}
	if m := d.Metrics(); !stalled || m.WriteStalls.Count == 0 {
		t.Fatalf("stalled %v:\n%s", stalled, m)
	}
}

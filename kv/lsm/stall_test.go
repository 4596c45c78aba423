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

// TestPendingCompactionBytesStall: with a level far over its target and
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
	load := func(prefix string) {
		for i := 0; i < 100; i++ {
			if err := d.Set([]byte(fmt.Sprintf("%s%06d", prefix, i)), val, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Compact(context.Background(), []byte(prefix), []byte(prefix+"~")); err != nil {
			t.Fatal(err)
		}
	}
	// The first 100 KB go to L6 (an empty tree's base level); that makes
	// the base level one whose target is 1 KiB, and the next 100 KB,
	// which overlap nothing below, land there, far over target.
	load("k")
	load("m")
	m := d.Metrics()
	if m.Levels[6].Tables == 0 || m.BaseLevel >= 6 || m.Levels[m.BaseLevel].Tables == 0 || m.PendingCompactionBytes < opts.HardPendingCompactionBytes {
		t.Fatalf("pending %d bytes, want over %d:\n%s", m.PendingCompactionBytes, opts.HardPendingCompactionBytes, m)
	}
	stalled := false
	for i := 0; i < 1000 && !stalled; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		b := NewBatch()
		b.Set([]byte(fmt.Sprintf("p%06d", i)), val)
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

// TestDynamicLevels loads enough to need several levels and checks the
// shape: L0 compacts into the base level, levels above it are empty,
// and each level below is within its target.
func TestDynamicLevels(t *testing.T) {
	opts := smallOptions()
	opts.LBaseMaxBytes = 16 << 10
	d := mustOpen(t, newMemFS(), opts)
	defer d.Close()
	for i := 0; i < 4000; i++ {
		if err := d.Set([]byte(fmt.Sprintf("k%06d", (i*7919)%4000)), make([]byte, 200), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Let background compactions finish.
	for d.Metrics().Compact.InProgress > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	m := d.Metrics()
	if m.BaseLevel >= 6 || m.BaseLevel < 1 {
		t.Fatalf("base level L%d after 800 KB with a 16 KiB base:\n%s", m.BaseLevel, m)
	}
	for l := 1; l < m.BaseLevel; l++ {
		if m.Levels[l].Tables != 0 {
			t.Fatalf("L%d above the base level L%d holds tables:\n%s", l, m.BaseLevel, m)
		}
	}
	if m.Levels[6].Size == 0 {
		t.Fatalf("nothing reached L6:\n%s", m)
	}
	for i := 0; i < 4000; i++ {
		expectGet(t, d, fmt.Sprintf("k%06d", i), string(make([]byte, 200)))
	}
}

package lsm

import (
	"context"
	"fmt"
	"testing"
)

// TestL0Cache: flushed memtables answer Gets in their L0 tables' place,
// with a snapshot open and overwrites, deletes and a range deletion in
// the memtables; flushes past the budget are ordinary ones, newer than
// cached memtables; a compaction out of L0 empties the cache; every read
// matches a model throughout.
func TestL0Cache(t *testing.T) {
	ctx := context.Background()
	opts := smallOptions()
	opts.DisableAutomaticCompactions = true
	opts.L0StopWritesThreshold = 1000
	opts.L0SlowdownWritesThreshold = 1000
	opts.Offload = &OffloadOptions{L0CacheBytes: 20 << 10} // about five flushes of write()
	d := mustOpen(t, newMemFS(), opts)
	defer d.Close()
	model := map[string]string{}
	check := func(what string) {
		t.Helper()
		for i := range 400 {
			k := fmt.Sprintf("k%04d", i)
			v, err := d.Get([]byte(k))
			want, ok := model[k]
			if (err == nil) != ok || string(v) != want {
				t.Fatalf("%s: get %s: %q, %v; want %q (present %v)", what, k, v, err, want, ok)
			}
		}
	}
	write := func(round int) {
		t.Helper()
		for i := range 400 {
			k := fmt.Sprintf("k%04d", (i*7+round)%400)
			switch {
			case i%13 == 0:
				if err := d.Delete([]byte(k), nil); err != nil {
					t.Fatal(err)
				}
				delete(model, k)
			case i%5 == round%5:
				v := fmt.Sprintf("%s-r%d", k, round)
				if err := d.Set([]byte(k), []byte(v), nil); err != nil {
					t.Fatal(err)
				}
				model[k] = v
			}
		}
		if round == 1 {
			if err := d.DeleteRange([]byte("k0100"), []byte("k0150"), nil); err != nil {
				t.Fatal(err)
			}
			for i := 100; i < 150; i++ {
				delete(model, fmt.Sprintf("k%04d", i))
			}
		}
		if err := d.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	snap := d.NewSnapshot()
	defer snap.Close()
	write(0)
	write(1)
	m := d.OffloadMetrics()
	if m.L0CacheTables != 2 {
		t.Fatalf("after two flushes: %+v", m)
	}
	check("cached")
	if m := d.OffloadMetrics(); m.L0CacheHits == 0 {
		t.Fatalf("no Get read a cached memtable: %+v", m)
	}
	for round := 2; d.OffloadMetrics().L0CacheFull == 0; round++ {
		if round > 20 {
			t.Fatalf("the cache never filled: %+v", d.OffloadMetrics())
		}
		write(round)
		check(fmt.Sprintf("round %d", round))
	}
	cached := d.OffloadMetrics().L0CacheTables
	write(30)
	write(31)
	check("uncached tables above cached memtables")
	if m := d.OffloadMetrics(); m.L0CacheTables != cached {
		t.Fatalf("a full cache changed: %d memtables, then %+v", cached, m)
	}
	if err := d.Compact(ctx, []byte("k"), []byte("l")); err != nil {
		t.Fatal(err)
	}
	if m := d.OffloadMetrics(); m.L0CacheTables != 0 || m.L0CacheBytes != 0 {
		t.Fatalf("after compacting L0 away: %+v", m)
	}
	check("compacted")
}

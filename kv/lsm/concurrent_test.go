package lsm

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestConcurrentWritersAndReaders commits from many goroutines (group
// commit, rotations, flushes and compactions under way) while others read,
// then checks every write landed and that each writer's keys show its
// last value.
func TestConcurrentWritersAndReaders(t *testing.T) {
	opts := smallOptions()
	opts.MaxConcurrentCompactions = 2
	fs := newMemFS()
	d := mustOpen(t, fs, opts)
	const writers, per = 6, 400
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var rwg sync.WaitGroup
	for r := 0; r < 2; r++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				it, err := d.NewIter(nil)
				if err != nil {
					t.Error(err)
					return
				}
				var prev []byte
				for ok := it.First(); ok; ok = it.Next() {
					if prev != nil && string(prev) >= string(it.Key()) {
						t.Errorf("iterator out of order: %q then %q", prev, it.Key())
					}
					prev = append(prev[:0], it.Key()...)
				}
				if err := it.Close(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				b := NewBatch()
				b.Set([]byte(fmt.Sprintf("w%d-%04d", w, i)), []byte(fmt.Sprintf("v%d-%d-%0200d", w, i, 0)))
				b.Set([]byte(fmt.Sprintf("last-%d", w)), []byte(fmt.Sprint(i)))
				if err := d.Apply(context.Background(), b, &WriteOptions{Sync: i%10 == 0}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	check := func(d *DB) {
		t.Helper()
		for w := 0; w < writers; w++ {
			expectGet(t, d, fmt.Sprintf("last-%d", w), fmt.Sprint(per-1))
			for i := 0; i < per; i++ {
				expectGet(t, d, fmt.Sprintf("w%d-%04d", w, i), fmt.Sprintf("v%d-%d-%0200d", w, i, 0))
			}
		}
	}
	check(d)
	m := d.Metrics()
	if m.WAL.Batches != writers*per {
		t.Fatalf("%d batches committed, want %d", m.WAL.Batches, writers*per)
	}
	t.Logf("%d batches in %d commit groups; %d flushes, %d compactions", m.WAL.Batches, m.WAL.CommitGroups, m.Flush.Count, m.Compact.Count)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, fs, opts)
	check(d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

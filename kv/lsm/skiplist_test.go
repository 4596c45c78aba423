package lsm

import (
	"fmt"
	"sync"
	"testing"
)

// TestSkiplistConcurrent inserts from several goroutines while others
// read, then checks order and completeness.
func TestSkiplistConcurrent(t *testing.T) {
	const writers, per = 4, 2000
	s := newSkiplist(newArena(8 << 20))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it := &skiplistIter{s: s}
			for {
				select {
				case <-stop:
					return
				default:
				}
				var prev []byte
				for ok := it.First(); ok; ok = it.Next() {
					if prev != nil && compareInternal(prev, it.Key()) >= 0 {
						t.Errorf("out of order: %s then %s", formatKey(prev), formatKey(it.Key()))
						return
					}
					prev = it.Key()
				}
			}
		}()
	}
	var ww sync.WaitGroup
	for w := 0; w < writers; w++ {
		ww.Add(1)
		go func() {
			defer ww.Done()
			for i := 0; i < per; i++ {
				k := makeInternalKey([]byte(fmt.Sprintf("key%05d", (i*7919)%per)), SeqNum(w*per+i+1), KindSet)
				if !s.add(k, []byte("v")) {
					t.Error("arena full")
					return
				}
			}
		}()
	}
	ww.Wait()
	close(stop)
	wg.Wait()
	n := 0
	it := &skiplistIter{s: s}
	for ok := it.Last(); ok; ok = it.Prev() {
		n++
	}
	if n != writers*per || s.count.Load() != writers*per {
		t.Fatalf("%d entries backward, count %d, want %d", n, s.count.Load(), writers*per)
	}
}

func TestArenaFull(t *testing.T) {
	m := newMemTable(1024, 0)
	n := 0
	for m.points.add(makeInternalKey([]byte(fmt.Sprintf("k%d", n)), SeqNum(n+1), KindSet), make([]byte, 30)) {
		n++
	}
	if n == 0 || int(m.points.count.Load()) != n {
		t.Fatalf("added %d, count %d", n, m.points.count.Load())
	}
	it := m.newIter()
	c := 0
	for ok := it.First(); ok; ok = it.Next() {
		c++
	}
	if c != n {
		t.Fatalf("a failed add left a trace: %d entries, %d added", c, n)
	}
}

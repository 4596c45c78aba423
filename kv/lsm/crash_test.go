package lsm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// crashOp is one step of the crash workload.
type crashOp struct {
	kind  string // "batch", "flush", "compact"
	ops   [][3]string
	sync  bool
	model model // the state after this op
}

// crashWorkload is a fixed sequence of batches (sets, deletes, range
// deletes over a small key space), flushes and compactions, with the
// model state after each.
func crashWorkload(seed uint64, n int) []crashOp {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := model{}
	var out []crashOp
	key := func() string { return fmt.Sprintf("k%03d", rng.IntN(60)) }
	for i := 0; i < n; i++ {
		op := crashOp{kind: "batch", sync: rng.IntN(2) == 0}
		switch p := rng.IntN(100); {
		case p < 4:
			op = crashOp{kind: "flush"}
		case p < 7:
			op = crashOp{kind: "compact"}
		default:
			for j := 0; j < 1+rng.IntN(4); j++ {
				switch q := rng.IntN(10); {
				case q < 7:
					op.ops = append(op.ops, [3]string{"set", key(), fmt.Sprintf("v%d.%d-%0*d", i, j, rng.IntN(300), 0)})
				case q < 9:
					op.ops = append(op.ops, [3]string{"del", key(), ""})
				default:
					a, b := key(), key()
					if a > b {
						a, b = b, a
					}
					op.ops = append(op.ops, [3]string{"rangedel", a, b})
				}
			}
			applyToModel(m, op.ops)
		}
		op.model = maps.Clone(m)
		out = append(out, op)
	}
	return out
}

// runCrashWorkload runs ops until one fails; it returns how many
// completed and the index of the last synced batch acknowledged (-1 if
// none).
func runCrashWorkload(d *DB, ops []crashOp) (done, lastSynced int) {
	lastSynced = -1
	for i, op := range ops {
		var err error
		switch op.kind {
		case "flush":
			err = d.Flush(context.Background())
		case "compact":
			err = d.Compact(context.Background(), []byte("k"), []byte("l"))
		default:
			b := NewBatch()
			for _, o := range op.ops {
				switch o[0] {
				case "set":
					b.Set([]byte(o[1]), []byte(o[2]))
				case "del":
					b.Delete([]byte(o[1]))
				case "rangedel":
					b.DeleteRange([]byte(o[1]), []byte(o[2]))
				}
			}
			err = d.Apply(context.Background(), b, &WriteOptions{Sync: op.sync})
			if err == nil && op.sync {
				lastSynced = i
			}
		}
		if err != nil {
			return i, lastSynced
		}
	}
	return len(ops), lastSynced
}

// dbState reads every key of the workload's key space.
func dbState(t *testing.T, d *DB) model {
	t.Helper()
	m := model{}
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		m[string(it.Key())] = string(it.Value())
	}
	if err := it.Close(); err != nil {
		t.Fatalf("iterating recovered store: %v", err)
	}
	for k := 0; k < 60; k++ {
		key := fmt.Sprintf("k%03d", k)
		v, err := d.Get([]byte(key))
		want, ok := m[key]
		if ok != (err == nil) || string(v) != want || (err != nil && !errors.Is(err, ErrNotFound)) {
			t.Fatalf("Get(%s) = %q, %v disagrees with the iterator (%q, %v)", key, v, err, want, ok)
		}
	}
	return m
}

// TestCrashRecovery crashes the store at every mutating file-system
// operation of a workload (writes, syncs, creations, renames, directory
// syncs — in the WAL, tables, MANIFEST and CURRENT), optionally tearing
// unsynced appends, and checks that the store reopens without error and
// holds exactly the state after some prefix of the workload that
// includes every acknowledged synced batch: nothing acknowledged is
// lost, no batch is partly applied, nothing is corrupt.
func TestCrashRecovery(t *testing.T) {
	opts := smallOptions()
	opts.MemTableSize = 4 << 10
	opts.TargetFileSize = 4 << 10
	opts.LBaseMaxBytes = 8 << 10
	opts.MaxManifestFileSize = 300 // rotate MANIFESTs within the workload too
	ops := crashWorkload(1, 150)

	// Count the operations of an uncrashed run.
	fs := newMemFS()
	d := mustOpen(t, fs, opts)
	fs.crashAfter(1 << 30)
	firstManifest := d.manifestNum
	if done, _ := runCrashWorkload(d, ops); done != len(ops) {
		t.Fatalf("uncrashed run stopped at op %d", done)
	}
	if d.manifestNum == firstManifest {
		t.Fatal("the workload never rotated the MANIFEST")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	total := 1<<30 - fs.left
	fs.mu.Unlock()
	if got := dbState(t, mustOpen(t, fs.crashImage(nil, false), opts)); !maps.Equal(got, ops[len(ops)-1].model) {
		t.Fatalf("uncrashed run's final state differs from the model")
	}

	step := 1
	if testing.Short() {
		step = 7
	}
	rng := rand.New(rand.NewPCG(3, 4))
	crashes := 0
	for n := 0; n < total; n += step {
		fs := newMemFS()
		fs.crashAfter(n)
		d, err := Open(fs, "db", opts)
		done, lastSynced := 0, -1
		if err == nil {
			done, lastSynced = runCrashWorkload(d, ops)
			d.Close()
		}
		if !fs.hasCrashed() {
			continue
		}
		crashes++
		torn := n%2 == 1
		img := fs.crashImage(rng, torn)
		d2, err := Open(img, "db", opts)
		if err != nil {
			t.Fatalf("crash after %d ops (torn=%v): reopen: %v", n, torn, err)
		}
		got := dbState(t, d2)
		matched := -2
		if len(got) == 0 && lastSynced < 0 {
			matched = -1
		}
		for p := max(lastSynced, 0); p <= min(done, len(ops)-1) && matched == -2; p++ {
			if maps.Equal(got, ops[p].model) {
				matched = p
			}
		}
		if matched == -2 {
			t.Fatalf("crash after %d fs ops (torn=%v) at workload op %d, last synced %d: recovered state (%d keys) is no prefix's state",
				n, torn, done, lastSynced, len(got))
		}
		// The recovered store keeps working and survives another reopen.
		if err := d2.Set([]byte("after"), []byte("crash"), &WriteOptions{Sync: true}); err != nil {
			t.Fatal(err)
		}
		if err := d2.Close(); err != nil {
			t.Fatal(err)
		}
		d3 := mustOpen(t, img, opts)
		expectGet(t, d3, "after", "crash")
		if err := d3.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if crashes < total/step/2 {
		t.Fatalf("only %d of %d runs crashed", crashes, total/step)
	}
	t.Logf("%d crash points over %d file-system operations", crashes, total)
}

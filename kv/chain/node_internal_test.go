package chain

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain/chainpb"
)

// memStore is a Store in a map, enough for the node's own bookkeeping:
// this file tests the node's rules, not a store's, from inside the
// package, which the real stores (lsmstore, leedstore) import.
type memStore struct {
	kv      map[string][]byte
	applied uint64
}

func (m *memStore) Apply(_ context.Context, seq uint64, op Op) error {
	if seq != m.applied+1 {
		return fmt.Errorf("write %d after %d", seq, m.applied)
	}
	if op.Record == nil {
		if op.Delete {
			delete(m.kv, string(op.Key))
		} else {
			m.kv[string(op.Key)] = op.Value
		}
	}
	m.applied = seq
	return nil
}
func (m *memStore) Get(_ context.Context, key []byte) ([]byte, bool, error) {
	v, ok := m.kv[string(key)]
	return v, ok, nil
}
func (m *memStore) Applied() uint64                                { return m.applied }
func (m *memStore) Snapshot() (Snapshot, error)                    { return nil, fmt.Errorf("no snapshots") }
func (m *memStore) Reset(context.Context) error                    { m.kv, m.applied = map[string][]byte{}, 0; return nil }
func (m *memStore) Import(context.Context, []KV) error             { return fmt.Errorf("no imports") }
func (m *memStore) SetApplied(_ context.Context, seq uint64) error { m.applied = seq; return nil }

func newTestNode(t *testing.T) (*Node, *memStore) {
	t.Helper()
	st := &memStore{kv: map[string][]byte{}}
	n, err := NewNode(NodeConfig{ID: "b", Group: "g", Store: st, Control: &cluster.Control{}})
	if err != nil {
		t.Fatal(err)
	}
	return n, st
}

func writes(seqs ...uint64) *chainpb.ShipMsg {
	ws := make([]*chainpb.Write, len(seqs))
	for i, s := range seqs {
		ws[i] = &chainpb.Write{Seq: s, Key: fmt.Appendf(nil, "k%d", s%3), Value: fmt.Appendf(nil, "v%d", s)}
	}
	return &chainpb.ShipMsg{Body: &chainpb.ShipMsg_Writes{Writes: &chainpb.Writes{Writes: ws}}}
}

// A successor applies a message of several writes as it would the same
// writes one by one: in order, skipping those it holds (shipped again
// after a reconfiguration), refusing a gap, and keeping (logged, dirty)
// the writes before the one it refused.
func TestReceiveWrites(t *testing.T) {
	ctx := context.Background()
	n, st := newTestNode(t)
	started := false
	steps := []struct {
		name    string
		msg     *chainpb.ShipMsg
		code    codes.Code
		applied uint64
	}{
		{"three in one message", writes(1, 2, 3), codes.OK, 3},
		{"one alone", &chainpb.ShipMsg{Body: &chainpb.ShipMsg_Write{Write: &chainpb.Write{Seq: 4, Key: []byte("k1"), Value: []byte("v4")}}}, codes.OK, 4},
		{"shipped again, then new", writes(2, 3, 4, 5, 6), codes.OK, 6},
		{"all shipped again", writes(5, 6), codes.OK, 6},
		{"a gap first", writes(8, 9), codes.FailedPrecondition, 6},
		{"a gap after one", writes(7, 9), codes.FailedPrecondition, 7},
		{"empty", writes(), codes.OK, 7},
	}
	for _, s := range steps {
		err := n.receive(ctx, s.msg, &started)
		if status.Code(err) != s.code {
			t.Fatalf("%s: %v, want %v", s.name, err, s.code)
		}
		n.mu.Lock()
		applied, logged, base := n.applied, len(n.entries), n.logBase
		n.mu.Unlock()
		if applied != s.applied || st.applied != s.applied || base+uint64(logged) != s.applied {
			t.Fatalf("%s: node applied %d, store %d, log (%d, +%d], want %d", s.name, applied, st.applied, base, logged, s.applied)
		}
	}
	// The last write to each key wins, and none is committed yet: a
	// member that is not the tail has every key dirty.
	for k, want := range map[string]string{"k0": "v6", "k1": "v7", "k2": "v5"} {
		if v, _, _ := st.Get(ctx, []byte(k)); !bytes.Equal(v, []byte(want)) {
			t.Fatalf("%s = %q, want %q", k, v, want)
		}
		n.mu.Lock()
		_, dirty := n.dirty[k]
		n.mu.Unlock()
		if !dirty {
			t.Fatalf("%s is clean before any commit", k)
		}
	}
}

// Each Put is woken when the commit point passes its write, and only
// then, whatever order the waits were taken in.
func TestCommitWaits(t *testing.T) {
	ctx := context.Background()
	n, _ := newTestNode(t)
	started := false
	if err := n.receive(ctx, writes(1, 2, 3, 4, 5, 6, 7, 8), &started); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	chs := map[uint64]<-chan struct{}{}
	for _, s := range []uint64{5, 3, 7, 3, 8} {
		chs[s] = n.commitWaitLocked(s)
	}
	for _, step := range []struct {
		commit uint64
		woken  []uint64
	}{{2, nil}, {3, []uint64{3}}, {6, []uint64{3, 5}}, {8, []uint64{3, 5, 7, 8}}} {
		n.setCommittedLocked(step.commit)
		for s, ch := range chs {
			want := false
			for _, w := range step.woken {
				want = want || w == s
			}
			select {
			case <-ch:
				if !want {
					t.Fatalf("commit %d woke the wait for %d", step.commit, s)
				}
			default:
				if want {
					t.Fatalf("commit %d left the wait for %d asleep", step.commit, s)
				}
			}
		}
	}
	if len(n.waits) != 0 {
		t.Fatalf("%d waits left after everything committed", len(n.waits))
	}
}

func TestShipBatchLen(t *testing.T) {
	big := bytes.Repeat([]byte{1}, maxShipBytes/2+1)
	op := func(v []byte) entry { return entry{op: Op{Key: []byte("k"), Value: v}} }
	for _, c := range []struct {
		name  string
		batch []entry
		want  int
	}{
		{"one small", []entry{op(nil)}, 1},
		{"many small", []entry{op(nil), op(nil), op(nil)}, 3},
		{"one over the cap goes alone", []entry{op(bytes.Repeat([]byte{1}, 2*maxShipBytes)), op(nil)}, 1},
		{"two halves and a bit", []entry{op(big), op(big), op(nil)}, 1},
		{"a record counts", []entry{op(nil), {op: Op{Record: bytes.Repeat([]byte{1}, maxShipBytes)}}, op(nil)}, 1},
	} {
		if got := shipBatchLen(c.batch); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

package chain_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/internal/chaintest"
	"github.com/nearstore/nearstore/kv/chain"
)

// TestBalanceMovesRangeUnderLoad loads only group g0's keys: the
// balancer measures g0 hot and g1 idle and moves the upper half of g0's
// range to g1 while the writers go on; then the range is moved back by
// hand (g0 still holds its old copy, which the move clears first). No
// acknowledged write is lost, every key is its owner group's only, and
// the writes that waited for a frozen range went to its new group.
func TestBalanceMovesRangeUnderLoad(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, stop := range startSharded(ctx, t, r, []string{"g0", "g1"}, []string{"a", "b", "c"}) {
		t.Cleanup(stop)
	}
	rt, err := chain.NewRouter(ctx, chain.RouterConfig{Control: r.ctl})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()

	// Keys of g0's range only.
	l := chaintest.Start(rt, func(w, i int) string { return fmt.Sprintf("%c-w%d-%06d", byte(rand.IntN(0x80)), w, i) }, nil)
	l.WaitAcked(t, 200)
	p, moved, st, err := chain.Balance(ctx, chain.BalanceConfig{Control: r.ctl, Window: 2 * time.Second, Ratio: 2, MinWrites: 20})
	if err != nil || !moved {
		t.Fatalf("balance: %+v moved=%v %v", p, moved, err)
	}
	if p.From != "g0" || p.To != "g1" || string(p.Start) != "\x40" || string(p.End) != "\x80" || p.Load["g1"] != 0 {
		t.Fatalf("plan %+v, want [0x40, 0x80) from g0 to g1", p)
	}
	t.Logf("balance: load %v, moved %d keys in %v (versions %v)", p.Load, st.Copied, st.Frozen, st.Versions)
	if st.Copied == 0 || st.Cleared != 0 {
		t.Fatalf("move: %+v", st)
	}
	l.WaitAcked(t, l.Acked()+200) // writes go on after the move, to both groups
	m, err := r.ctl.ShardMap(ctx)
	if err != nil || m.Version != 4 || m.Group([]byte{0x50}) != "g1" || m.Group([]byte{0x30}) != "g0" {
		t.Fatalf("map after the move: %+v %v", m, err)
	}

	st, err = chain.MoveRange(ctx, chain.MoveConfig{Control: r.ctl, Start: []byte{0x40}, End: []byte{0x80}, To: "g0"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Cleared == 0 || st.Copied == 0 || st.From != "g1" {
		t.Fatalf("move back: %+v (g0 held its old copy of the range)", st)
	}
	l.WaitAcked(t, l.Acked()+100)
	acked := l.Finish()
	t.Logf("%d keys acknowledged, %d failed attempts; moved back %d keys, cleared %d, frozen %v", len(acked), l.Fails(), st.Copied, st.Cleared, st.Frozen)
	if m, err = r.ctl.ShardMap(ctx); err != nil || len(m.Shards) != 2 || m.Version != 7 {
		t.Fatalf("map after moving back: %+v %v (want the first map's shards again)", m, err)
	}
	chaintest.CheckOwned(ctx, t, r.ctl, rt, acked)

	// A mover that died after its begin leaves the range frozen: writes
	// to it wait; the same move run again resumes and ends it.
	begun, _, err := r.ctl.UpdateShardMap(ctx, func(cur cluster.ShardMap) (cluster.ShardMap, bool, error) {
		next, err := cluster.BeginMove(cur, []byte{0x20}, []byte{0x30}, "g1")
		return next, err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := chain.WaitAcks(ctx, r.ctl, begun.Version); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	err = rt.Put(short, []byte("\x25frozen"), []byte("x"))
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write to a frozen range: %v, want it to wait", err)
	}
	put := make(chan error, 1)
	go func() { put <- rt.Put(ctx, []byte("\x25frozen"), []byte("v")) }()
	if st, err = chain.MoveRange(ctx, chain.MoveConfig{Control: r.ctl, Start: []byte{0x20}, End: []byte{0x30}, To: "g1"}); err != nil {
		t.Fatalf("resumed move: %v", err)
	}
	if err := <-put; err != nil {
		t.Fatalf("the write that waited for the move: %v", err)
	}
	acked["\x25frozen"] = "v"
	chaintest.CheckOwned(ctx, t, r.ctl, rt, acked)
	// Scans see each key once, from its owner.
	kvs, err := rt.Scan(ctx, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if v, ok := acked[string(kv.Key)]; ok && v != string(kv.Value) {
			t.Fatalf("scan %q: %q, want %q", kv.Key, kv.Value, v)
		}
	}
	if len(kvs) < len(acked) {
		t.Fatalf("scan: %d keys, %d acknowledged", len(kvs), len(acked))
	}
}

package chain_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/chain/lsmstore"
	"github.com/nearstore/nearstore/kv/lsm"
)

type rig struct {
	t testing.TB
	// open opens node id's store (default: kv/lsm in its directory).
	open  func(id string) (store, error)
	ctl   *cluster.Control
	dir   string
	mu    sync.Mutex
	nodes map[string]*runNode
}

type runNode struct {
	cancel context.CancelFunc
	done   chan error
	store  store
	node   *chain.Node
}

// store is a node's store, as the rig opens and closes it.
type store interface {
	chain.Store
	Close() error
}

func newRig(t testing.TB) *rig {
	t.Helper()
	e, err := cluster.StartEmbedded(context.Background(), cluster.EmbedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ctl, err := cluster.Dial(e.Endpoints(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	r := &rig{t: t, ctl: ctl, dir: t.TempDir(), nodes: map[string]*runNode{}}
	t.Cleanup(func() {
		r.mu.Lock()
		ids := slices.Collect(func(yield func(string) bool) {
			for id := range r.nodes {
				if !yield(id) {
					return
				}
			}
		})
		r.mu.Unlock()
		for _, id := range ids {
			r.stop(id)
		}
	})
	return r
}

// start runs node id in this process on a real TCP listener and an
// lsm store in its own directory.
func (r *rig) start(id string) {
	r.t.Helper()
	var st store
	var err error
	if r.open != nil {
		st, err = r.open(id)
	} else {
		st, err = lsmstore.Open(filepath.Join(r.dir, id), lsm.Options{})
	}
	if err != nil {
		r.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	n, err := chain.NewNode(chain.NodeConfig{ID: id, Group: "g", Addr: ln.Addr().String(), Store: st, Control: r.ctl})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx, ln) }()
	r.mu.Lock()
	r.nodes[id] = &runNode{cancel: cancel, done: done, store: st, node: n}
	r.mu.Unlock()
}

// stop ends node id (its lease is revoked) and closes its store.
func (r *rig) stop(id string) {
	r.mu.Lock()
	n := r.nodes[id]
	delete(r.nodes, id)
	r.mu.Unlock()
	n.cancel()
	<-n.done
	n.store.Close()
}

// waitChain waits until the group's chain satisfies ok.
func (r *rig) waitChain(ok func(cluster.Chain) bool) cluster.Chain {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := r.ctl.Chain(context.Background(), "g"); err == nil && ok(c) {
			return c
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := r.ctl.Chain(context.Background(), "g")
	r.t.Fatalf("chain never reached the wanted state: %+v %v", c, err)
	return c
}

// startChain creates group g's chain of ids, starts the nodes, and waits
// until the chain is whole again (fresh nodes leave and rejoin one by
// one through COPY).
func (r *rig) startChain(ctx context.Context, ids ...string) cluster.Chain {
	r.t.Helper()
	if _, err := r.ctl.CreateChain(ctx, "g", ids); err != nil {
		r.t.Fatal(err)
	}
	for _, id := range ids {
		r.start(id)
	}
	return r.waitChain(func(c cluster.Chain) bool { return len(c.Members) == len(ids) && c.Joining == "" })
}

// node returns running node id.
func (r *rig) node(id string) *runNode {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[id]
}

// waitLogEmpty waits until node id logs no write for re-shipping: every
// write is committed and acknowledged by its successor.
func (r *rig) waitLogEmpty(id string) {
	r.t.Helper()
	nd := r.node(id).node
	deadline := time.Now().Add(10 * time.Second)
	for chain.LogLen(nd) != 0 {
		if time.Now().After(deadline) {
			r.t.Fatalf("node %s still logs %d writes", id, chain.LogLen(nd))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func members(want ...string) func(cluster.Chain) bool {
	return func(c cluster.Chain) bool { return slices.Equal(c.Members, want) && c.Joining == "" }
}

func TestChainReplicatesAndReconfigures(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	r.startChain(ctx, "a", "b", "c")

	want := map[string]string{}
	put := func(cl *chain.Client, i int) {
		k, v := fmt.Sprintf("k%04d", i%300), fmt.Sprintf("v%d", i)
		if err := cl.Put(ctx, []byte(k), []byte(v)); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		want[k] = v
	}
	check := func(cl *chain.Client) {
		t.Helper()
		for k, v := range want {
			got, found, err := cl.Get(ctx, []byte(k))
			if err != nil || !found || string(got) != v {
				t.Fatalf("get %s = %q %v %v, want %q", k, got, found, err, v)
			}
		}
	}
	crrs, err := chain.NewClient(ctx, chain.ClientConfig{Control: r.ctl, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer crrs.Close()
	tail, err := chain.NewClient(ctx, chain.ClientConfig{Control: r.ctl, Group: "g", Reads: chain.ReadTail})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	for i := range 500 {
		put(crrs, i)
	}
	if err := crrs.Delete(ctx, []byte("k0007")); err != nil {
		t.Fatal(err)
	}
	delete(want, "k0007")
	check(crrs)
	check(tail)
	if _, found, err := crrs.Get(ctx, []byte("k0007")); err != nil || found {
		t.Fatalf("deleted key: found=%v err=%v", found, err)
	}
	// Every member holds every committed write, read straight from its
	// store: the acknowledged writes are on every replica.
	c0 := r.waitChain(func(cluster.Chain) bool { return true })
	for _, id := range c0.Members {
		st := r.node(id).store
		for k, v := range want {
			got, ok, err := st.Get(ctx, []byte(k))
			if err != nil || !ok || string(got) != v {
				t.Fatalf("node %s: %s = %q %v %v, want %q", id, k, got, ok, err, v)
			}
		}
	}
	if s := crrs.Stats(); s.Reads == 0 || s.ReadsAtTail == s.Reads {
		t.Fatalf("CRRS client read only at the tail: %+v", s)
	}
	// Quiescent: every write is committed and acknowledged by every
	// successor, so no node keeps any for re-shipping.
	for _, id := range c0.Members {
		r.waitLogEmpty(id)
	}

	// Writes go on while the head, then the tail, stops and a node joins.
	head, tl := c0.Head(), c0.Tail()
	r.stop(head)
	for i := 500; i < 600; i++ {
		put(crrs, i)
	}
	r.stop(tl)
	for i := 600; i < 700; i++ {
		put(crrs, i)
	}
	c1 := r.waitChain(func(c cluster.Chain) bool { return len(c.Members) == 1 })
	check(tail)
	r.start(head)
	for i := 700; i < 800; i++ {
		put(crrs, i)
	}
	r.waitChain(members(c1.Members[0], head))
	check(tail)
	check(crrs)
}

// Writers in parallel, as clients are: the head ships the writes it
// applied while a message was on its way together in the next, and each
// replica applies them in order. Every acknowledged write is on every
// member, and once quiet no node logs any.
func TestConcurrentWritesReachEveryReplica(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c0 := r.startChain(ctx, "a", "b", "c")
	cl, err := chain.NewClient(ctx, chain.ClientConfig{Control: r.ctl, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const writers, each = 16, 60
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each writer overwrites its own keys, so the last value of
			// each is the one it put last.
			for i := range each {
				if err := cl.Put(ctx, fmt.Appendf(nil, "w%02d-%d", w, i%7), fmt.Appendf(nil, "v%d", i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, id := range c0.Members {
		st := r.node(id).store
		for w := range writers {
			for k := range 7 {
				last := each - 1 - (each-1-k)%7
				got, ok, err := st.Get(ctx, fmt.Appendf(nil, "w%02d-%d", w, k))
				if err != nil || !ok || string(got) != fmt.Sprintf("v%d", last) {
					t.Fatalf("node %s: w%02d-%d = %q %v %v, want v%d", id, w, k, got, ok, err, last)
				}
			}
		}
		r.waitLogEmpty(id)
	}
	s := r.node(c0.Head()).node.ShipStats()
	if s.Writes < writers*each || s.Messages == 0 || s.Messages > s.Writes {
		t.Fatalf("the head shipped %d writes in %d messages, want at least %d writes", s.Writes, s.Messages, writers*each)
	}
	t.Logf("the head shipped %d writes in %d messages", s.Writes, s.Messages)
}

// A node that comes back holding writes the chain never committed, under
// sequence numbers the chain has since given to other writes, must not
// keep them: it rejoins through a COPY even when its applied point looks
// current.
func TestRejoinDiscardsDivergentHistory(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := r.ctl.CreateChain(ctx, "g", []string{"a"}); err != nil {
		t.Fatal(err)
	}
	r.start("a")
	r.waitChain(members("a"))
	cl, err := chain.NewClient(ctx, chain.ClientConfig{Control: r.ctl, Group: "g", Reads: chain.ReadTail})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 50
	for i := range n {
		if err := cl.Put(ctx, fmt.Appendf(nil, "k%d", i), []byte("chain")); err != nil {
			t.Fatal(err)
		}
	}
	// d's store: the same number of writes, to the same keys, other
	// values (a history the chain never had).
	st, err := lsmstore.Open(filepath.Join(r.dir, "d"), lsm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := st.Apply(ctx, uint64(i+1), chain.Op{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("stale")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	r.start("d")
	r.waitChain(members("a", "d"))
	for i := range n {
		v, found, err := cl.Get(ctx, fmt.Appendf(nil, "k%d", i))
		if err != nil || !found || string(v) != "chain" {
			t.Fatalf("k%d at the new tail: %q %v %v", i, v, found, err)
		}
	}
}

// A node whose lease is lost (revoked here, as when it pauses longer than
// its TTL) is taken out, and comes back by itself through a COPY.
func TestLeaseLossRejoins(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := r.ctl.CreateChain(ctx, "g", []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	r.start("a")
	r.start("b")
	before := r.waitChain(func(c cluster.Chain) bool { return len(c.Members) == 2 && c.Joining == "" })
	cl, err := chain.NewClient(ctx, chain.ClientConfig{Control: r.ctl, Group: "g", Reads: chain.ReadTail})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 100 {
		if err := cl.Put(ctx, fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	victim := before.Head()
	resp, err := r.ctl.Client.Get(ctx, r.ctl.NodeKey(victim))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("node key: %v %v", resp, err)
	}
	if _, err := r.ctl.Client.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	after := r.waitChain(func(c cluster.Chain) bool {
		return c.Epoch > before.Epoch+1 && len(c.Members) == 2 && c.Tail() == victim && c.Joining == ""
	})
	for i := range 100 {
		v, found, err := cl.Get(ctx, fmt.Appendf(nil, "k%d", i))
		if err != nil || !found || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("k%d at %s (epoch %d): %q %v %v", i, after.Tail(), after.Epoch, v, found, err)
		}
	}
}

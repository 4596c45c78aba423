package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// startEtcd runs a real embedded etcd for the test and returns a client.
func startEtcd(t *testing.T) *Control {
	t.Helper()
	ctx := context.Background()
	e, err := StartEmbedded(ctx, EmbedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ctl, err := Dial(e.Endpoints(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	return ctl
}

func TestControlOnEtcd(t *testing.T) {
	c := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if _, err := c.Chain(ctx, "g"); !errors.Is(err, ErrNoChain) {
		t.Fatalf("want ErrNoChain, got %v", err)
	}
	ch, err := c.CreateChain(ctx, "g", []string{"a", "b", "c"})
	if err != nil || ch.Epoch != 1 {
		t.Fatalf("create: %+v %v", ch, err)
	}
	// A second create keeps the first configuration.
	if ch2, err := c.CreateChain(ctx, "g", []string{"x"}); err != nil || ch2.Members[0] != "a" {
		t.Fatalf("second create: %+v %v", ch2, err)
	}

	// Concurrent updates from the same starting point: each is applied
	// exactly once, on top of the other (compare-and-swap retries).
	var wg sync.WaitGroup
	for _, id := range []string{"a", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := c.Update(ctx, "g", func(cur Chain) (Chain, bool, error) {
				next, ev := Remove(cur, id)
				return next, len(ev) > 0, nil
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ch, err = c.Chain(ctx, "g")
	if err != nil || ch.Epoch != 3 || len(ch.Members) != 1 || ch.Members[0] != "b" {
		t.Fatalf("after two removals: %+v %v", ch, err)
	}
	if _, _, err := c.Update(ctx, "g", func(cur Chain) (Chain, bool, error) {
		cur.Epoch += 2
		return cur, true, nil
	}); err == nil {
		t.Fatal("accepted an epoch jump")
	}

	// Registration, lease expiry and reconciliation: b is the member; d
	// registers and starts joining; when d's lease is revoked, the join
	// is dropped.
	w := c.WatchChain(ctx, "g")
	if got := <-w; got.Epoch != 3 {
		t.Fatalf("watch first: %+v", got)
	}
	rb, err := c.Register(ctx, Node{ID: "b", Addr: "x:1", Groups: []string{"g"}}, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	rd, err := c.Register(ctx, Node{ID: "d", Addr: "x:2", Groups: []string{"g"}}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if ch, ev, err := c.Reconcile(ctx, "g"); err != nil || ch.Joining != "d" || ev[0].Reason != JoinStarted {
		t.Fatalf("reconcile: %+v %v %v", ch, ev, err)
	}
	if got := <-w; got.Epoch != 4 || got.Joining != "d" {
		t.Fatalf("watch join: %+v", got)
	}
	rd.Close()
	if ch, ev, err := c.Reconcile(ctx, "g"); err != nil || ch.Joining != "" || ev[0].Reason != JoinerFailed {
		t.Fatalf("reconcile after d left: %+v %v %v", ch, ev, err)
	}
	if got := <-w; got.Epoch != 5 {
		t.Fatalf("watch: %+v", got)
	}
	nodes, err := c.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes["b"].Addr != "x:1" {
		t.Fatalf("nodes: %+v %v", nodes, err)
	}
}

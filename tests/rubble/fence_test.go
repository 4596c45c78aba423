package rubble_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/clustertest"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/kv/rubble"
	"github.com/nearstore/nearstore/volume"
)

// TestFenceSlots fences a secondary's real target through
// rubble.TargetDialer (found in a real etcd): a head of a newer epoch
// of a group cuts off the writes of the group's older head, which may
// not write again even by dialing anew; the heads of another group are
// left alone; a host that never fenced cannot write; and a node that
// heads no epoch does not dial.
func TestFenceSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, ctl := clustertest.Etcd(t)
	srv, _ := secondaryTarget(t)
	t.Cleanup(srv.Stop)
	registerTarget(ctx, t, ctl, "s", srv.Addr())

	heads := map[string]*rubble.TargetDialer{}
	head := func(name, group string, epoch uint64) *rubble.TargetDialer {
		d := heads[name+"/"+group]
		if d == nil {
			d = &rubble.TargetDialer{Control: ctl, Self: name, Group: group}
			heads[name+"/"+group] = d
			t.Cleanup(d.Close)
		}
		d.Fence(epoch)
		return d
	}
	block := make([]byte, 4096)
	write := func(d *rubble.TargetDialer) error {
		w, err := d.Dial(ctx, "s")
		if err != nil {
			return err
		}
		_, err = w.WriteAtContext(ctx, block, 0)
		return err
	}
	for _, step := range []struct {
		what   string
		dialer func() *rubble.TargetDialer
		want   error // nil, host.ErrReservationConflict or rubble.ErrDeposed
	}{
		{"g0's head of epoch 3 fences and writes", func() *rubble.TargetDialer { return head("a", "g0", 3) }, nil},
		{"g1's head of epoch 1 fences and writes", func() *rubble.TargetDialer { return head("a", "g1", 1) }, nil},
		{"g0's head of epoch 5 fences and writes", func() *rubble.TargetDialer { return head("b", "g0", 5) }, nil},
		{"g0's deposed head of epoch 3 is refused", func() *rubble.TargetDialer { return head("a", "g0", 3) }, rubble.ErrDeposed},
		{"g1's head still writes", func() *rubble.TargetDialer { return head("a", "g1", 1) }, nil},
		{"g0's head of epoch 5 still writes", func() *rubble.TargetDialer { return head("b", "g0", 5) }, nil},
		{"g0's head of epoch 5 heads epoch 6 and writes", func() *rubble.TargetDialer { return head("b", "g0", 6) }, nil},
		{"g0's node b heads no epoch now", func() *rubble.TargetDialer { return head("b", "g0", 0) }, rubble.ErrDeposed},
		{"a node heading no epoch does not dial", func() *rubble.TargetDialer { return head("c", "g0", 0) }, rubble.ErrDeposed},
		{"g0's head of epoch 4 (older than 6) is refused", func() *rubble.TargetDialer { return head("c", "g0", 4) }, rubble.ErrDeposed},
		{"g0's node a heads epoch 7 and writes", func() *rubble.TargetDialer { return head("a", "g0", 7) }, nil},
	} {
		err := write(step.dialer())
		if (step.want == nil) != (err == nil) || (step.want != nil && !errors.Is(err, step.want)) {
			t.Fatalf("%s: %v, want %v", step.what, err, step.want)
		}
		t.Logf("%s: %v", step.what, err)
	}

	// A write already dialed by a head, fenced off by a newer head of its
	// group, fails at the target: the case of a head paused while it
	// shipped.
	old := head("a", "g0", 7)
	w, err := old.Dial(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(head("c", "g0", 8)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAtContext(ctx, block, 0); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("the write of a fenced-off head: %v, want a reservation conflict", err)
	}

	// A host that never fenced cannot write.
	ns := connectNode(t, srv.Addr(), "s", rubble.NodeNQN("x")+":stranger")
	if _, err := ns.WriteAtContext(ctx, block, 0); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("an unregistered host's write: %v, want a reservation conflict", err)
	}
}

// connectNode connects to node id's target at addr as host hostNQN (no
// fencing: a host of its own) and returns namespace 1, its slot pools'
// volume; the connection closes when the test ends.
func connectNode(t *testing.T, addr, id, hostNQN string) *host.Namespace {
	t.Helper()
	_, ns := testhost.Connect(t, addr, rubble.NodeNQN(id), 1, host.Options{HostNQN: hostNQN, IOQueues: 1, KeepAlive: -1})
	return ns
}

// TestFenceWhileDialing: telling a dialer its epoch (Fence, which the
// store does from SetChain under the chain node's lock) does not wait
// for a Dial in progress. A secondary that died leaves the head's Dial
// connecting to its target until a timeout; the chain change removing
// that secondary must not wait for it, or the head's chain node stops
// serving meanwhile.
func TestFenceWhileDialing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, ctl := clustertest.Etcd(t)
	// A target that takes connections and never answers: a node whose
	// process hangs.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	registerTarget(ctx, t, ctl, "hung", ln.Addr().String())

	d := &rubble.TargetDialer{Control: ctl, Self: "a", Group: "g0"}
	t.Cleanup(d.Close)
	d.Fence(1)
	var released atomic.Bool // the test ended the Dial by closing its connection
	dialed := make(chan bool)
	go func() {
		_, err := d.Dial(ctx, "hung")
		t.Logf("dial: %v", err)
		dialed <- released.Load()
	}()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	fenced := make(chan struct{})
	go func() {
		d.Fence(0)
		close(fenced)
	}()
	select {
	case <-fenced:
	case <-ctx.Done():
		t.Fatal("Fence did not return")
	}
	released.Store(true)
	conn.Close()
	if !<-dialed {
		t.Fatal("Fence returned only once the Dial had given up on its own")
	}
}

// TestDialAfterTargetLost: a head whose connection to a secondary's
// target was lost for good (the target was away past the connection's
// loss timeout: the node paused, its network cut) dials anew once the
// target is back at its address, and fences and writes again, instead
// of failing every later edit's fence on the dead connection.
func TestDialAfterTargetLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, ctl := clustertest.Etcd(t)
	srv, cfg := secondaryTarget(t)
	t.Cleanup(func() { srv.Stop() })
	registerTarget(ctx, t, ctl, "s", srv.Addr())
	d := &rubble.TargetDialer{Control: ctl, Self: "a", Group: "g0"}
	t.Cleanup(d.Close)
	d.Fence(1)
	block := make([]byte, 4096)
	write := func() error {
		w, err := d.Dial(ctx, "s")
		if err != nil {
			return err
		}
		_, err = w.WriteAtContext(ctx, block, 0)
		return err
	}
	if err := write(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	// Write until the dialer gives up its connection (it connects anew:
	// the target refuses) or the connection gives up reconnecting.
	for {
		err := write()
		if err == nil {
			t.Fatal("a write with the target stopped")
		}
		t.Logf("target stopped: %v", err)
		if strings.Contains(err.Error(), "gave up reconnecting") || strings.Contains(err.Error(), "connect to s's target") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the connection was never given up: %v", err)
		}
	}
	cfg.Addr = srv.Addr()
	srv = testtarget.Start(t, cfg)
	if err := write(); err != nil {
		t.Fatalf("a write with the target back: %v", err)
	}
}

// secondaryTarget starts node "s"'s target on a volume of its own, and
// returns it and its configuration (to start it again).
func secondaryTarget(t *testing.T) (*testtarget.Target, testtarget.Config) {
	t.Helper()
	vol, err := volume.Open("mem:16MiB?bs=4096")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	cfg := testtarget.Config{NQN: rubble.NodeNQN("s"), Name: "secondary", Volume: vol}
	return testtarget.Start(t, cfg), cfg
}

// registerTarget registers node id in etcd with its target at addr, as
// a node serving does, until the test ends.
func registerTarget(ctx context.Context, t *testing.T, ctl *cluster.Control, id, addr string) {
	t.Helper()
	reg, err := ctl.Register(ctx, cluster.Node{ID: id, Addr: "127.0.0.1:1", Target: addr}, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
}

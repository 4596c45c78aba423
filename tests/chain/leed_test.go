package chain_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/internal/chaintest"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/clustertest"
	"github.com/nearstore/nearstore/kv/chain"
)

// leedArgs make every node's replica a LEED store (kv/chain/leedstore)
// on a device file.
var leedArgs = []string{"--store", "leed", "--leed-size", "32MiB"}

// TestLeedKillNodeUnderLoad is TestKillNodeUnderLoad with LEED replicas:
// a killed replica (head, middle or tail) loses no acknowledged write,
// and on restart it recovers its store from the device, rejoins through
// COPY (a LEED Reset, Import and SetApplied) and serves the same data.
// "leave" is a graceful leave: SIGTERM, the node revokes its lease and
// the chain drops it at once.
func TestLeedKillNodeUnderLoad(t *testing.T) {
	middle := func(c cluster.Chain) string { return c.Members[1] }
	for _, tt := range []struct {
		name string
		pick func(cluster.Chain) string
		sig  syscall.Signal
	}{
		{"head", cluster.Chain.Head, syscall.SIGKILL},
		{"middle", middle, syscall.SIGKILL},
		{"tail", cluster.Chain.Tail, syscall.SIGKILL},
		{"leave", middle, syscall.SIGTERM},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clustertest.StopUnderLoad(t, clustertest.NewClusterWith(t, leedArgs, "n1", "n2", "n3"), tt.name, tt.pick, tt.sig)
		})
	}
}

// TestLeedJoinUnderLoad starts a fourth LEED node while two writers load
// the chain: it joins through a COPY of the tail's store plus every write
// since, becomes the tail, and every acknowledged write reads back from
// it.
func TestLeedJoinUnderLoad(t *testing.T) {
	c := clustertest.NewClusterWith(t, leedArgs, "n1", "n2", "n3")
	writer := c.Client(t, chain.ReadCRRS)
	tail := c.Client(t, chain.ReadTail)
	l := clustertest.StartLoad(t, writer, tail)
	l.WaitAcked(t, 300)
	c.Start("n4")
	joined := c.WaitChain(func(ch cluster.Chain) bool { return len(ch.Members) == 4 && ch.Tail() == "n4" && ch.Joining == "" })
	l.WaitAcked(t, l.Acked()+300)
	acked := l.Finish()
	t.Logf("n4 joined (chain %v epoch %d) under %d acknowledged writes, %d failed attempts", joined.Members, joined.Epoch, len(acked), l.Fails())
	clustertest.CheckAll(t, tail, acked)
	if got := tail.Chain(); got.Tail() != "n4" {
		t.Fatalf("the reads went to %s, not to the new tail n4 (%+v)", got.Tail(), got)
	}
}

// TestLeedBalanceUnderLoad runs two groups on three LEED nodes and loads
// only g0's keys: "cluster balance" measures g0 hot and moves half its
// range to g1 while the writers go on, and "cluster move" moves it back
// (g0's old copy cleared first). No acknowledged write is lost, and each
// key reads back from its owner group only.
func TestLeedBalanceUnderLoad(t *testing.T) {
	c := clustertest.NewClusterGroups(t, leedArgs, []string{"g0", "g1"}, "n1", "n2", "n3")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rt, err := chain.NewRouter(ctx, chain.RouterConfig{Control: c.Ctl})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	// At most 9 bytes (LEED's keys are 1 to 16), first byte in g0's range.
	l := chaintest.Start(rt, func(w, i int) string { return fmt.Sprintf("%c%d-%06d", byte(rand.IntN(0x80)), w, i) }, nil)
	l.WaitAcked(t, 200)
	run := func(args ...string) clitest.Result {
		return clitest.Run(t, 5*time.Minute, nil, nil, append(args, "--etcd", c.Endpoint)...)
	}
	r := run("cluster", "balance", "--window", "2s", "--ratio", "2", "--min-writes", "20")
	if r.Code != 0 || !strings.Contains(r.Stdout, `moved ["@", "\x80") g0 -> g1: `) {
		t.Fatalf("balance: %+v", r)
	}
	t.Logf("balance: %s", r.Stdout)
	l.WaitAcked(t, l.Acked()+200)
	r = run("cluster", "move", "--start", `\x40`, "--end", `\x80`, "--to", "g0")
	if r.Code != 0 || !strings.Contains(r.Stdout, `moved ["@", "\x80") g1 -> g0: `) || strings.Contains(r.Stdout, " 0 cleared") {
		t.Fatalf("move back: %+v", r)
	}
	t.Logf("move back: %s", r.Stdout)
	if r := run("cluster", "move", "--start", `\x40`, "--to", "g0"); r.Code == 0 || !strings.Contains(r.Stderr, "not one unfrozen group's") {
		t.Fatalf("a move of two groups' keys: %+v", r)
	}
	l.WaitAcked(t, l.Acked()+100)
	acked := l.Finish()
	t.Logf("%d keys acknowledged, %d failed attempts", len(acked), l.Fails())
	chaintest.CheckOwned(ctx, t, c.Ctl, rt, acked)
	if r := run("cluster", "status"); r.Code != 0 || !strings.Contains(r.Stdout, `shard ["", "\x80") group g0`+"\n") {
		t.Fatalf("status after moving back: %+v", r)
	}
}

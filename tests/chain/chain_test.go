// Package chain_test runs a replicated cluster as a user would: a real
// etcd, and each node a separate "nearstore cluster node" process on
// loopback TCP with its own kv/lsm directory. It kills nodes with SIGKILL
// under a load of checked writes and checks that every acknowledged write
// survives and that a restarted node rejoins through COPY.
package chain_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/internal/chaintest"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/kv/chain"
)

func TestMain(m *testing.M) {
	code := m.Run()
	clitest.Cleanup()
	os.Exit(code)
}

const group = "g0"

type testCluster struct {
	t        *testing.T
	endpoint string
	ctl      *cluster.Control
	dir      string
	mu       sync.Mutex
	procs    map[string]*exec.Cmd
	args     []string // more flags of every "nearstore cluster node"
	groups   []string // with a shard map: the groups every node hosts (else group)
}

func newCluster(t *testing.T, ids ...string) *testCluster {
	t.Helper()
	return newClusterWith(t, nil, ids...)
}

// newClusterWith starts a cluster whose nodes take the flags args too.
func newClusterWith(t *testing.T, args []string, ids ...string) *testCluster {
	t.Helper()
	return newClusterGroups(t, args, nil, ids...)
}

// newClusterGroups starts a cluster of ids; with groups, a shard map
// spreads the keys over them (cluster.UniformShards) and every node
// hosts each, else the nodes serve the one group.
func newClusterGroups(t *testing.T, args, groups []string, ids ...string) *testCluster {
	t.Helper()
	e, err := cluster.StartEmbedded(context.Background(), cluster.EmbedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	c := &testCluster{t: t, endpoint: e.Endpoints()[0], ctl: &cluster.Control{Client: cli}, dir: t.TempDir(), procs: map[string]*exec.Cmd{}, args: args, groups: groups}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range c.procs {
			p.Process.Kill()
			p.Wait()
		}
	})
	chains := []string{group}
	if groups != nil {
		m, err := cluster.UniformShards(groups)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ctl.CreateShardMap(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		chains = groups
	}
	for _, g := range chains {
		if _, err := c.ctl.CreateChain(context.Background(), g, ids); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		c.start(id)
	}
	for _, g := range chains {
		c.waitGroup(g, func(ch cluster.Chain) bool { return len(ch.Members) == len(ids) && ch.Joining == "" })
	}
	return c
}

// start runs node id as its own process (its store in a directory kept
// across restarts) and waits for it to serve.
func (c *testCluster) start(id string) {
	c.t.Helper()
	gflags := []string{"--group", group}
	if c.groups != nil {
		gflags = []string{"--groups", strings.Join(c.groups, ",")}
	}
	p := exec.Command(clitest.Binary(c.t), append(append([]string{"cluster", "node", "--etcd", c.endpoint, "--id", id,
		"--data", filepath.Join(c.dir, id), "--lease-ttl", "2", "--log-level", "warn"}, gflags...), c.args...)...)
	p.Stderr = os.Stderr
	out, err := p.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		c.t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "node "+id+" serving on ") {
		p.Process.Kill()
		p.Wait()
		c.t.Fatalf("node %s: %q %v", id, line, err)
	}
	c.mu.Lock()
	c.procs[id] = p
	c.mu.Unlock()
}

// signal sends sig to node id and waits for it to exit: SIGKILL is a
// crash (no lease revocation, no flush), SIGTERM a graceful leave (the
// node revokes its lease, so the chain drops it at once).
func (c *testCluster) signal(id string, sig syscall.Signal) {
	c.t.Helper()
	c.mu.Lock()
	p := c.procs[id]
	delete(c.procs, id)
	c.mu.Unlock()
	if err := p.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
	p.Wait()
}

func (c *testCluster) waitChain(ok func(cluster.Chain) bool) cluster.Chain {
	c.t.Helper()
	return c.waitGroup(group, ok)
}

// waitGroup waits (two minutes at most) for g's chain to satisfy ok.
func (c *testCluster) waitGroup(g string, ok func(cluster.Chain) bool) cluster.Chain {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if ch, err := c.ctl.Chain(context.Background(), g); err == nil && ok(ch) {
			return ch
		}
		time.Sleep(50 * time.Millisecond)
	}
	ch, err := c.ctl.Chain(context.Background(), g)
	c.t.Fatalf("chain of %s never reached the wanted state: %+v %v", g, ch, err)
	return ch
}

// startLoad starts two checked writers through cl (chaintest.Load) and,
// right after every fifth acknowledged write, reads it at the tail
// through reader: a write is acknowledged only once it is on every
// replica.
func startLoad(t *testing.T, cl, reader *chain.Client) *chaintest.Load {
	return chaintest.Start(cl, func(w, i int) string { return fmt.Sprintf("w%d-%06d", w, i) }, func(k, v string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		got, found, err := reader.Get(ctx, []byte(k))
		if err == nil && (!found || string(got) != v) {
			t.Errorf("acknowledged write %s not at the tail right after: %q found=%v", k, got, found)
		}
	})
}

func checkAll(t *testing.T, cl *chain.Client, want map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for k, v := range want {
		got, found, err := cl.Get(ctx, []byte(k))
		if err != nil || !found || string(got) != v {
			t.Fatalf("acknowledged write %s: got %q found=%v err=%v, want %q", k, got, found, err, v)
		}
	}
}

func TestKillNodeUnderLoad(t *testing.T) {
	for _, tt := range []struct {
		name string
		pick func(cluster.Chain) string
	}{
		{"head", cluster.Chain.Head},
		{"middle", func(c cluster.Chain) string { return c.Members[1] }},
		{"tail", cluster.Chain.Tail},
	} {
		t.Run(tt.name, func(t *testing.T) {
			killUnderLoad(t, newCluster(t, "n1", "n2", "n3"), tt.name, tt.pick)
		})
	}
}

// killUnderLoad kills the member pick names while two writers load the
// chain, checks that every acknowledged write is at the new tail, then
// restarts the member and checks that it rejoins as the tail through
// COPY and serves the same data, to tail-only and CRRS readers.
func killUnderLoad(t *testing.T, c *testCluster, name string, pick func(cluster.Chain) string) {
	stopUnderLoad(t, c, name, pick, syscall.SIGKILL)
}

// stopUnderLoad is killUnderLoad stopping the member with sig.
func stopUnderLoad(t *testing.T, c *testCluster, name string, pick func(cluster.Chain) string, sig syscall.Signal) {
	ctx := context.Background()
	writer, err := chain.NewClient(ctx, chain.ClientConfig{Control: c.ctl, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	before := c.waitChain(func(cluster.Chain) bool { return true })
	victim := pick(before)
	tailReader, err := chain.NewClient(ctx, chain.ClientConfig{Control: c.ctl, Group: group, Reads: chain.ReadTail})
	if err != nil {
		t.Fatal(err)
	}
	defer tailReader.Close()

	l := startLoad(t, writer, tailReader)
	l.WaitAcked(t, 300)
	c.signal(victim, sig)
	after := c.waitChain(func(ch cluster.Chain) bool {
		return ch.Epoch > before.Epoch && !slices.Contains(ch.Members, victim) && len(ch.Members) == 2
	})
	want := slices.DeleteFunc(slices.Clone(before.Members), func(m string) bool { return m == victim })
	if !slices.Equal(after.Members, want) {
		t.Fatalf("after killing %s the chain is %v, want %v", victim, after.Members, want)
	}
	l.WaitAcked(t, l.Acked()+300)
	acked := l.Finish()
	t.Logf("killed %s (%s): %d writes acknowledged, %d failed attempts; chain %v epoch %d",
		name, victim, len(acked), l.Fails(), after.Members, after.Epoch)

	// Every acknowledged write is at the new tail.
	checkAll(t, tailReader, acked)

	// The killed node restarts on its old directory and rejoins
	// as the tail through COPY; it then serves the same data.
	c.start(victim)
	joined := c.waitChain(func(ch cluster.Chain) bool {
		return len(ch.Members) == 3 && ch.Tail() == victim && ch.Joining == ""
	})
	l2 := startLoad(t, writer, tailReader)
	l2.WaitAcked(t, 100)
	for k, v := range l2.Finish() {
		acked[k] = v
	}
	if err := tailReader.Put(ctx, []byte("last"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	acked["last"] = "x"
	checkAll(t, tailReader, acked) // the rejoined node is the tail
	crrs, err := chain.NewClient(ctx, chain.ClientConfig{Control: c.ctl, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	defer crrs.Close()
	checkAll(t, crrs, acked)
	if s := crrs.Stats(); s.ReadsAtTail == s.Reads {
		t.Fatalf("CRRS reads all went to the tail: %+v", s)
	}
	t.Logf("rejoined: chain %v epoch %d", joined.Members, joined.Epoch)
}

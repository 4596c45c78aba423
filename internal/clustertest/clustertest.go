// Package clustertest runs replicated clusters as users do, for tests
// under tests/: a real etcd (embedded in the test process) and each node
// a separate "nearstore cluster node" process on loopback TCP with its
// own data directory; a load of checked writes; SIGKILL of a chain
// member under it, and its restart.
package clustertest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/internal/chaintest"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/kv/chain"
)

// Group is the replication group of a cluster without a shard map.
const Group = "g0"

// Cluster is an etcd (in the test process) and node processes, all
// stopped when the test ends.
type Cluster struct {
	t        *testing.T
	Endpoint string
	Ctl      *cluster.Control
	Dir      string
	mu       sync.Mutex
	procs    map[string]*exec.Cmd
	logs     map[string]*os.File          // node → its stderr log, Dir/ID.log (see Stderr)
	last     map[string]map[string]string // node → the last stdout line after the first, by its first and third words
	args     []string                     // more flags of every "nearstore cluster node"
	groups   []string                     // with a shard map: the groups every node hosts (else Group)
}

// NewCluster starts etcd, creates group Group with the chain ids, and
// starts each node, waiting until they all are members.
func NewCluster(t *testing.T, ids ...string) *Cluster {
	t.Helper()
	return NewClusterWith(t, nil, ids...)
}

// NewClusterWith starts a cluster whose nodes take the flags args too.
func NewClusterWith(t *testing.T, args []string, ids ...string) *Cluster {
	t.Helper()
	return NewClusterGroups(t, args, nil, ids...)
}

// NewClusterGroups starts a cluster of ids; with groups, a shard map
// spreads the keys over them (cluster.UniformShards) and every node
// hosts each, else the nodes serve the one group Group.
func NewClusterGroups(t *testing.T, args, groups []string, ids ...string) *Cluster {
	t.Helper()
	endpoint, ctl := Etcd(t)
	c := &Cluster{t: t, Endpoint: endpoint, Ctl: ctl, Dir: t.TempDir(),
		procs: map[string]*exec.Cmd{}, logs: map[string]*os.File{}, last: map[string]map[string]string{}, args: args, groups: groups}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for id, p := range c.procs {
			p.Process.Kill()
			p.Wait()
			c.logs[id].Close()
		}
	})
	chains := []string{Group}
	if groups != nil {
		m, err := cluster.UniformShards(groups)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Ctl.CreateShardMap(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		chains = groups
	}
	for _, g := range chains {
		if _, err := c.Ctl.CreateChain(context.Background(), g, ids); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		c.Start(id)
	}
	for _, g := range chains {
		c.WaitGroup(g, func(ch cluster.Chain) bool { return len(ch.Members) == len(ids) && ch.Joining == "" })
	}
	return c
}

// Etcd starts an embedded etcd for the test and returns its endpoint
// and a control plane on it; both stop when the test ends.
func Etcd(t *testing.T) (endpoint string, ctl *cluster.Control) {
	t.Helper()
	e, err := cluster.StartEmbedded(context.Background(), cluster.EmbedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ctl, err = cluster.Dial(e.Endpoints(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	return e.Endpoints()[0], ctl
}

// Start runs node id as its own process (its store in a directory kept
// across restarts) and waits for it to serve.
func (c *Cluster) Start(id string) {
	c.t.Helper()
	gflags := []string{"--group", Group}
	if c.groups != nil {
		gflags = []string{"--groups", strings.Join(c.groups, ",")}
	}
	p := exec.Command(clitest.Binary(c.t), append(append([]string{"cluster", "node", "--etcd", c.Endpoint, "--id", id,
		"--data", filepath.Join(c.Dir, id), "--lease-ttl", "2", "--log-level", "warn"}, gflags...), c.args...)...)
	// The node's log goes to the test's stderr and, across restarts, to
	// Dir/ID.log (Stderr).
	lf, err := os.OpenFile(filepath.Join(c.Dir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	p.Stderr = io.MultiWriter(os.Stderr, lf)
	out, err := p.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		lf.Close()
		c.t.Fatal(err)
	}
	rd := bufio.NewReader(out)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "node "+id+" serving on ") {
		p.Process.Kill()
		p.Wait()
		lf.Close()
		c.t.Fatalf("node %s: %q %v", id, line, err)
	}
	c.mu.Lock()
	c.procs[id] = p
	c.logs[id] = lf
	c.last[id] = map[string]string{}
	c.mu.Unlock()
	go func() { // the node's later lines (e.g. --stats-interval's)
		sc := bufio.NewScanner(rd)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 3 {
				c.mu.Lock()
				c.last[id][f[0]+" "+f[2]] = sc.Text()
				c.mu.Unlock()
			}
		}
	}()
}

// Last returns the last line node id printed after its first whose
// first and third words are first and third (a "stats node=ID group=G
// …" line: "stats", "group=G"), or "".
func (c *Cluster) Last(id, first, third string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last[id][first+" "+third]
}

// KillAll sends SIGKILL to every node.
func (c *Cluster) KillAll() {
	c.t.Helper()
	for _, id := range c.running() {
		c.Kill(id)
	}
}

// StopAll sends SIGTERM to every node at once, as a whole cluster is
// shut down, and waits for them all to exit.
func (c *Cluster) StopAll() {
	c.t.Helper()
	var wg sync.WaitGroup
	for _, id := range c.running() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Signal(id, syscall.SIGTERM)
		}()
	}
	wg.Wait()
}

func (c *Cluster) running() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0, len(c.procs))
	for id := range c.procs {
		ids = append(ids, id)
	}
	return ids
}

// Kill sends SIGKILL to node id: no lease revocation, no flush.
func (c *Cluster) Kill(id string) {
	c.t.Helper()
	c.Signal(id, syscall.SIGKILL)
}

// Signal sends sig to node id and waits for it to exit: SIGKILL is a
// crash (no lease revocation, no flush), SIGTERM a graceful leave (the
// node revokes its lease, so the chain drops it at once).
func (c *Cluster) Signal(id string, sig syscall.Signal) {
	c.t.Helper()
	c.mu.Lock()
	p, lf := c.procs[id], c.logs[id]
	delete(c.procs, id)
	delete(c.logs, id)
	c.mu.Unlock()
	if err := p.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
	p.Wait() // and its stderr copied
	lf.Close()
}

// Pause stops node id with SIGSTOP (it keeps its connections and state
// but does nothing, as a node stalled or cut off would); Resume
// continues it.
func (c *Cluster) Pause(id string) { c.t.Helper(); c.signalRunning(id, syscall.SIGSTOP) }

// Resume continues node id after Pause (SIGCONT).
func (c *Cluster) Resume(id string) { c.t.Helper(); c.signalRunning(id, syscall.SIGCONT) }

func (c *Cluster) signalRunning(id string, sig syscall.Signal) {
	c.t.Helper()
	c.mu.Lock()
	p := c.procs[id]
	c.mu.Unlock()
	if p == nil {
		c.t.Fatalf("node %s is not running", id)
	}
	if err := p.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
}

// Stderr returns everything node id wrote to stderr (its log, at the
// level "warn" and above) in all its runs so far; a node's log is
// complete once it has exited (Signal).
func (c *Cluster) Stderr(id string) string {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Dir, id+".log"))
	if err != nil && !os.IsNotExist(err) {
		c.t.Fatal(err)
	}
	return string(b)
}

// WaitChain waits until group Group's chain satisfies ok, and returns it.
func (c *Cluster) WaitChain(ok func(cluster.Chain) bool) cluster.Chain {
	c.t.Helper()
	return c.WaitGroup(Group, ok)
}

// WaitGroup waits (two minutes at most: the machine may be loaded) for
// g's chain to satisfy ok, and returns it.
func (c *Cluster) WaitGroup(g string, ok func(cluster.Chain) bool) cluster.Chain {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if ch, err := c.Ctl.Chain(context.Background(), g); err == nil && ok(ch) {
			return ch
		}
		time.Sleep(50 * time.Millisecond)
	}
	ch, err := c.Ctl.Chain(context.Background(), g)
	c.t.Fatalf("chain of %s never reached the wanted state: %+v %v", g, ch, err)
	return ch
}

// StartLoad starts two checked writers through cl (chaintest.Load) and,
// right after every fifth acknowledged write, reads it at the tail
// through reader: a write is acknowledged only once it is on every
// replica. Each load writes keys of its own (a random tag in each, 14
// bytes in all, within LEED's 16), so a later load never overwrites a
// key an earlier one acknowledged and the maps of both stay true.
func StartLoad(t *testing.T, cl, reader *chain.Client) *chaintest.Load {
	tag := rand.Uint32() & 0xffff
	return chaintest.Start(cl, func(w, i int) string { return fmt.Sprintf("w%d-%04x-%06d", w, tag, i) }, func(k, v string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		got, found, err := reader.Get(ctx, []byte(k))
		if err == nil && (!found || string(got) != v) {
			t.Errorf("acknowledged write %s not at the tail right after: %q found=%v", k, got, found)
		}
	})
}

// Client connects a client of group Group reading by reads, closed when
// the test ends.
func (c *Cluster) Client(t *testing.T, reads chain.ReadMode) *chain.Client {
	t.Helper()
	cl, err := chain.NewClient(context.Background(), chain.ClientConfig{Control: c.Ctl, Group: Group, Reads: reads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// CheckAll reads every write in want through cl.
func CheckAll(t *testing.T, cl *chain.Client, want map[string]string) {
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

// Victim is a chain position a kill test stops: Pick names the member
// at that position of a chain.
type Victim struct {
	Name string
	Pick func(cluster.Chain) string
}

// Victims are the three positions whose loss chain replication repairs
// differently: the head (a new head takes the writes), a middle node
// (its neighbours are joined) and the tail (its predecessor becomes the
// tail and acknowledges). Middle is the second member, so the chain
// must have three or more.
func Victims() []Victim {
	return []Victim{
		{"head", cluster.Chain.Head},
		{"middle", func(c cluster.Chain) string { return c.Members[1] }},
		{"tail", cluster.Chain.Tail},
	}
}

// KillUnderLoad kills the member pick names while two writers load the
// chain, checks that every acknowledged write is at the new tail, then
// restarts the member and checks that it rejoins as the tail through
// COPY and serves the same data, to tail-only and CRRS readers.
func KillUnderLoad(t *testing.T, c *Cluster, name string, pick func(cluster.Chain) string) {
	StopUnderLoad(t, c, name, pick, syscall.SIGKILL)
}

// StopUnderLoad is KillUnderLoad stopping the member with sig.
func StopUnderLoad(t *testing.T, c *Cluster, name string, pick func(cluster.Chain) string, sig syscall.Signal) {
	ctx := context.Background()
	writer, err := chain.NewClient(ctx, chain.ClientConfig{Control: c.Ctl, Group: Group})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	before := c.WaitChain(func(cluster.Chain) bool { return true })
	victim := pick(before)
	tailReader, err := chain.NewClient(ctx, chain.ClientConfig{Control: c.Ctl, Group: Group, Reads: chain.ReadTail})
	if err != nil {
		t.Fatal(err)
	}
	defer tailReader.Close()

	l := StartLoad(t, writer, tailReader)
	l.WaitAcked(t, 300)
	c.Signal(victim, sig)
	after := c.WaitChain(func(ch cluster.Chain) bool {
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
	CheckAll(t, tailReader, acked)

	// The killed node restarts on its old directory and rejoins
	// as the tail through COPY; it then serves the same data.
	c.Start(victim)
	joined := c.WaitChain(func(ch cluster.Chain) bool {
		return len(ch.Members) == 3 && ch.Tail() == victim && ch.Joining == ""
	})
	l2 := StartLoad(t, writer, tailReader)
	l2.WaitAcked(t, 100)
	for k, v := range l2.Finish() {
		acked[k] = v
	}
	if err := tailReader.Put(ctx, []byte("last"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	acked["last"] = "x"
	CheckAll(t, tailReader, acked) // the rejoined node is the tail
	crrs, err := chain.NewClient(ctx, chain.ClientConfig{Control: c.Ctl, Group: Group})
	if err != nil {
		t.Fatal(err)
	}
	defer crrs.Close()
	CheckAll(t, crrs, acked)
	if s := crrs.Stats(); s.ReadsAtTail == s.Reads {
		t.Fatalf("CRRS reads all went to the tail: %+v", s)
	}
	t.Logf("rejoined: chain %v epoch %d", joined.Members, joined.Epoch)
}

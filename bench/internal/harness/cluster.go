package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/cluster"
)

// ChainClusterSpec describes a local replicated KV cluster, as
// "nearstore cluster up" runs one: an embedded etcd (its own process,
// "nearstore cluster etcd") holding the shard map and each group's chain n1 → … → nN, and N
// "nearstore node serve" processes, each hosting a replica of every
// group.
type ChainClusterSpec struct {
	// Exe is the nearstore executable the nodes run.
	Exe string
	// Dir holds etcd's data (Dir/etcd) and each node's (Dir/n1, …).
	Dir string
	// Nodes is the chain length.
	Nodes int
	// Shards is the shard map written before the nodes start; its groups
	// are the ones the nodes host.
	Shards cluster.ShardMap
	// NodeArgs are further "node serve" flags for every node (--store …).
	NodeArgs []string
	// LogLevel is the nodes' --log-level (default warn).
	LogLevel string
	// Stderr, if set, returns the writer that receives node id's
	// standard error.
	Stderr func(id string) io.Writer
	// Ready bounds the wait for every node to serve and every chain to
	// hold every node (default 60 s).
	Ready time.Duration
}

// ChainCluster is a running local cluster. Close stops it.
type ChainCluster struct {
	// Control is a client of the cluster's etcd.
	Control *cluster.Control
	// Endpoint is etcd's client URL, and EtcdPID its process.
	Endpoint string
	EtcdPID  int
	// Nodes are the node processes, n1 first.
	Nodes   []ClusterNode
	closers Closers
}

// ClusterNode is one node process.
type ClusterNode struct {
	ID   string
	Proc *proc.Process
}

// NodeRefusedError is a process that exited with status 2 before
// serving: the binary refused its command line (an unknown --store,
// say), so the configuration is unavailable in this build rather than
// broken.
type NodeRefusedError struct {
	Node   string // the process's name ("nearstore node n1")
	Stderr string
}

func (e *NodeRefusedError) Error() string {
	return fmt.Sprintf("bench: %s refused its command line: %s", e.Node, e.Stderr)
}

// StartChainCluster starts the cluster spec describes and waits until
// every group's chain holds every node, none joining. On error, what
// it started is stopped.
func StartChainCluster(ctx context.Context, spec ChainClusterSpec) (_ *ChainCluster, err error) {
	if spec.Nodes < 1 || spec.Exe == "" || spec.Dir == "" {
		return nil, fmt.Errorf("bench: cluster of %d nodes of %q in %q", spec.Nodes, spec.Exe, spec.Dir)
	}
	if err := spec.Shards.Validate(); err != nil {
		return nil, err
	}
	if spec.LogLevel == "" {
		spec.LogLevel = "warn"
	}
	if spec.Ready <= 0 {
		spec.Ready = 60 * time.Second
	}
	c := &ChainCluster{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	readyCtx, cancel := context.WithTimeout(ctx, spec.Ready)
	defer cancel()
	// etcd runs as its own process ("nearstore cluster etcd", an
	// embedded etcd), so its CPU and its logs stay out of this one's.
	etcd, line, err := startPrinting(ctx, readyCtx, proc.Spec{Name: "nearstore cluster etcd", Path: spec.Exe,
		Args: []string{"cluster", "etcd", "--dir", filepath.Join(spec.Dir, "etcd")}}, "etcd ")
	if etcd != nil {
		c.closers = append(c.closers, etcd.Stop)
	}
	if err != nil {
		return nil, err
	}
	c.Endpoint = strings.TrimPrefix(line, "etcd ")
	c.EtcdPID = etcd.Pid()
	if c.Control, err = cluster.Dial(strings.Split(c.Endpoint, ","), ""); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	c.closers = append(c.closers, c.Control.Close)
	if _, err := c.Control.CreateShardMap(ctx, spec.Shards); err != nil {
		return nil, err
	}
	var ids []string
	for i := 1; i <= spec.Nodes; i++ {
		ids = append(ids, fmt.Sprintf("n%d", i))
	}
	groups := spec.Shards.Groups()
	for _, g := range groups {
		if _, err := c.Control.CreateChain(ctx, g, ids); err != nil {
			return nil, err
		}
	}
	for _, id := range ids {
		if err := c.startNode(ctx, readyCtx, spec, id, groups); err != nil {
			return nil, err
		}
	}
	for {
		full := true
		for _, g := range groups {
			ch, err := c.Control.Chain(readyCtx, g)
			if err != nil || len(ch.Members) != spec.Nodes || ch.Joining != "" {
				full = false
				break
			}
		}
		if full {
			return c, nil
		}
		select {
		case <-readyCtx.Done():
			return nil, fmt.Errorf("bench: chains not complete after %v: %w", spec.Ready, readyCtx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startNode starts node id (stopped by Close) and waits for its
// "node ID serving on ADDR" line.
func (c *ChainCluster) startNode(ctx, readyCtx context.Context, spec ChainClusterSpec, id string, groups []string) error {
	args := append([]string{"node", "serve", "--etcd", c.Endpoint, "--groups", strings.Join(groups, ","), "--id", id,
		"--data", filepath.Join(spec.Dir, id), "--log-level", spec.LogLevel}, spec.NodeArgs...)
	ps := proc.Spec{Name: "nearstore node " + id, Path: spec.Exe, Args: args}
	if spec.Stderr != nil {
		ps.Stderr = spec.Stderr(id)
	}
	p, _, err := startPrinting(ctx, readyCtx, ps, "node "+id+" serving on ")
	if p != nil {
		c.Nodes = append(c.Nodes, ClusterNode{ID: id, Proc: p})
	}
	return err
}

// startPrinting starts spec's program (bound to ctx) and waits, until
// readyCtx ends, for the first line of its standard output, which must
// begin with prefix; it returns the line without its newline. A program
// that exits with status 2 before, refusing its command line, is a
// *NodeRefusedError. The process is returned whenever it started, for
// the caller to stop.
func startPrinting(ctx, readyCtx context.Context, spec proc.Spec, prefix string) (*proc.Process, string, error) {
	pr, pw := io.Pipe()
	spec.Stdout = pw
	p, err := proc.Start(ctx, spec)
	if err != nil {
		pw.Close()
		return nil, "", err
	}
	go func() {
		<-p.Done()
		pw.Close()
	}()
	line := make(chan string, 1)
	go func() {
		br := bufio.NewReader(pr)
		l, _ := br.ReadString('\n')
		line <- strings.TrimSuffix(l, "\n")
		io.Copy(io.Discard, br)
	}()
	select {
	case l := <-line:
		if strings.HasPrefix(l, prefix) {
			return p, l, nil
		}
		err := p.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 2 {
			return p, "", &NodeRefusedError{Node: spec.Name, Stderr: p.StderrTail()}
		}
		return p, "", fmt.Errorf("bench: %s did not start (%q): %v", spec.Name, l, err)
	case <-readyCtx.Done():
		return p, "", fmt.Errorf("bench: %s not ready: %w", spec.Name, readyCtx.Err())
	}
}

// Chains returns each group's members, head first, as etcd holds them.
func (c *ChainCluster) Chains(ctx context.Context) (map[string][]string, error) {
	m, err := c.Control.ShardMap(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, g := range m.Groups() {
		ch, err := c.Control.Chain(ctx, g)
		if err != nil {
			return nil, err
		}
		out[g] = slices.Clone(ch.Members)
	}
	return out, nil
}

// Close stops the nodes (all at once, each SIGTERM then SIGKILL after a
// few seconds), then etcd. It returns the first node failure: a node
// that had exited by itself.
func (c *ChainCluster) Close() error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.Proc.Stop()
		}()
	}
	wg.Wait()
	c.Nodes = nil
	return errors.Join(append(errs, c.closers.Close())...)
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/rubble"
)

func newClusterCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "A replicated KV cluster: etcd control plane and chain-replicated (CRRS) nodes",
		Long: `cluster runs nearstore's replicated KV cluster (docs/CLUSTER.md): etcd holds
membership, each replication group's chain and its epoch; nodes replicate a
kv/lsm store by chain replication with request shipping.`,
	}
	node := newNodeServeCmd(g, "node")
	node.Short = "Run one storage node (the same as \"nearstore node serve\")"
	cmd.AddCommand(newClusterEtcdCmd(g), node, newClusterUpCmd(g), newClusterStatusCmd(), newClusterPutCmd(), newClusterGetCmd(),
		newClusterDelCmd(), newClusterScanCmd(), newClusterMoveCmd(), newClusterBalanceCmd())
	return cmd
}

// etcdFlags are the flags of commands that talk to etcd.
type etcdFlags struct {
	endpoints, prefix, group string
}

func (f *etcdFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.endpoints, "etcd", "", "etcd endpoints, comma-separated (required)")
	cmd.Flags().StringVar(&f.prefix, "prefix", cluster.DefaultPrefix, "etcd key prefix of the cluster")
	cmd.Flags().StringVar(&f.group, "group", "g0", "replication group")
}

func (f *etcdFlags) control() (*cluster.Control, func(), error) {
	if f.endpoints == "" {
		return nil, nil, usageErrorf("--etcd is required")
	}
	ctl, err := cluster.Dial(strings.Split(f.endpoints, ","), f.prefix)
	if err != nil {
		return nil, nil, err
	}
	return ctl, func() { ctl.Close() }, nil
}

// withControl runs fn with a control-plane connection and a context that
// ends after timeout (0: only when ctx does), closing both after.
func (f *etcdFlags) withControl(ctx context.Context, timeout time.Duration, fn func(context.Context, *cluster.Control) error) error {
	ctl, closeCtl, err := f.control()
	if err != nil {
		return err
	}
	defer closeCtl()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return fn(ctx, ctl)
}

func newClusterEtcdCmd(g *globals) *cobra.Command {
	var dir, clientAddr, peerAddr string
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run a single-member etcd (embedded) as this process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.sig.set(signalsStop)
			if dir == "" {
				return usageErrorf("--dir is required")
			}
			e, err := cluster.StartEmbedded(cmd.Context(), cluster.EmbedConfig{Dir: dir, ClientAddr: clientAddr, PeerAddr: peerAddr})
			if err != nil {
				return err
			}
			defer e.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "etcd %s\n", strings.Join(e.Endpoints(), ","))
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "etcd data directory (required)")
	cmd.Flags().StringVar(&clientAddr, "client-addr", "", "host:port for clients (default: a free port on 127.0.0.1)")
	cmd.Flags().StringVar(&peerAddr, "peer-addr", "", "host:port for peers (default: a free port on 127.0.0.1)")
	return cmd
}

// newNodeCmd is "nearstore node": the storage node process.
func newNodeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "A storage node of the replicated KV cluster (docs/CLUSTER.md)",
	}
	cmd.AddCommand(newNodeServeCmd(g, "serve"))
	return cmd
}

// newNodeServeCmd is "nearstore node serve", also reachable under its
// older name "nearstore cluster node".
func newNodeServeCmd(g *globals, use string) *cobra.Command {
	var (
		ef             etcdFlags
		groups         []string
		id, listen     string
		data           string
		readIOPS       float64
		leaseTTL, memt int
		ns             nodeStore
		statsEvery     time.Duration
		cpuprof        string
	)
	cmd := &cobra.Command{
		Use:   use,
		Short: "Run one storage node: a replica of each of its groups (kv/lsm stores replicated by CRRS)",
		Long: `serve runs one storage node hosting a replica of --group (or of each of
--groups): for each group it opens a kv/lsm store (in --data with --group, in
--data/GROUP with --groups), takes itself out of the group's chain, and joins
it through a COPY from the tail; the node registers in etcd once, with a
lease of --lease-ttl seconds, and serves every group on one listener. It
prints "node ID serving on ADDR" once it listens. SIGINT or SIGTERM stop it
(its lease is revoked); kill -9 leaves the lease to expire.`,
		Example: `  nearstore node serve --etcd http://127.0.0.1:2379 --id n1 --data /var/lib/nearstore/n1 --groups g0,g1 --listen 127.0.0.1:7001`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.sig.set(signalsStop)
			if id == "" || data == "" {
				return usageErrorf("--id and --data are required")
			}
			dirOf := func(string) string { return data }
			if cmd.Flags().Changed("groups") {
				if cmd.Flags().Changed("group") {
					return usageErrorf("give --group or --groups, not both")
				}
				dirOf = func(group string) string { return filepath.Join(data, group) }
			} else {
				groups = []string{ef.group}
			}
			for i, gr := range groups {
				if gr == "" || strings.ContainsAny(gr, "/\\") || slices.Contains(groups[:i], gr) {
					return usageErrorf("bad or repeated group %q", gr)
				}
			}
			stopProfile, err := startCPUProfile(cpuprof)
			if err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer stopProfile()
			ctl, closeCtl, err := ef.control()
			if err != nil {
				return err
			}
			defer closeCtl()
			ctl.Log = g.logger()
			ns.memt = memt
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			targetAddr, stopTarget, err := ns.startRubble(cmd.Context(), data, id, ctl, g.logger())
			if err != nil {
				return err
			}
			defer stopTarget() // after the stores close (deferred later)
			var nodes []*chain.Node
			var stores []chain.Store
			for _, gr := range groups {
				st, closeStore, err := ns.open(cmd.Context(), id, gr, dirOf(gr), g.logger())
				if err != nil {
					return err
				}
				defer closeStore()
				n, err := chain.NewNode(chain.NodeConfig{
					ID: id, Group: gr, Addr: ln.Addr().String(), Store: st, Control: ctl,
					LeaseTTL: leaseTTL, ReadIOPS: readIOPS, Log: g.logger(),
				})
				if err != nil {
					return err
				}
				if a, ok := st.(interface{ Attach(rubble.Appender) }); ok {
					a.Attach(n)
				}
				nodes = append(nodes, n)
				stores = append(stores, st)
			}
			h, err := chain.NewHost(chain.HostConfig{ID: id, Addr: ln.Addr().String(), Target: targetAddr, Control: ctl, LeaseTTL: leaseTTL, Log: g.logger()}, nodes...)
			if err != nil {
				return err
			}
			var outMu sync.Mutex
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "node %s serving on %s\n", id, ln.Addr())
			if statsEvery > 0 {
				sctx, stopStats := context.WithCancel(cmd.Context())
				statsDone := make(chan struct{})
				go func() {
					defer close(statsDone)
					printStats(sctx, out, &outMu, id, groups, stores, statsEvery)
				}()
				defer func() { stopStats(); <-statsDone }()
			}
			if log := g.logger(); log.Enabled(cmd.Context(), slog.LevelDebug) {
				sctx, stopShip := context.WithCancel(cmd.Context())
				shipDone := make(chan struct{})
				go func() {
					defer close(shipDone)
					logShipStats(sctx, log, groups, nodes, time.Second)
				}()
				defer func() { stopShip(); <-shipDone }()
			}
			err = runQuiescing(cmd.Context(), h, ln, stores, g.logger())
			if cmd.Context().Err() != nil {
				return nil
			}
			return err
		},
	}
	ef.add(cmd)
	cmd.Flags().StringSliceVar(&groups, "groups", nil, "replication groups this node hosts, comma-separated (instead of --group)")
	cmd.Flags().StringVar(&id, "id", "", "node ID (required)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address of the node's chain service")
	cmd.Flags().StringVar(&data, "data", "", "directory of the node's kv/lsm stores (required)")
	cmd.Flags().Float64Var(&readIOPS, "read-iops", 0, "model a device admitting this many store reads per second, per group (0: unthrottled)")
	cmd.Flags().IntVar(&leaseTTL, "lease-ttl", 2, "etcd lease in seconds: a dead node leaves the chains this long after")
	cmd.Flags().IntVar(&memt, "memtable-size", 0, "kv/lsm memtable size in bytes (0: the default)")
	cmd.Flags().StringVar(&cpuprof, "cpuprofile", "", "write a CPU profile of the node to this file, from start to shutdown (SIGINT/SIGTERM)")
	cmd.Flags().DurationVar(&statsEvery, "stats-interval", 0, "print a \"stats node=ID group=G mode=M flushes=… flush_ms=… compactions=… compact_ms=… …\" line per group this often, and once at exit (0: never)")
	ns.flags(cmd.Flags())
	return cmd
}

// quiescer is a store with background work that needs the node's chain
// (a RubbleDB primary ships and appends its edits through it).
type quiescer interface {
	Quiesce(ctx context.Context) error
}

// quiesceWait bounds how long a stopping node waits for its stores'
// background work before it leaves the chains anyway.
const quiesceWait = 30 * time.Second

// runQuiescing runs h until ctx ends; then, while h still serves, it
// quiesces every store that has background work (quiescer), and only
// then stops h, which closes the nodes' chain views and leaves the
// chains. So a graceful stop (SIGTERM) finds no flush or compaction
// still running once the chains are gone.
func runQuiescing(ctx context.Context, h *chain.Host, ln net.Listener, stores []chain.Store, log *slog.Logger) error {
	hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-hctx.Done():
			return // h stopped by itself
		case <-ctx.Done():
		}
		qctx, cancel := context.WithTimeout(hctx, quiesceWait)
		defer cancel()
		for _, st := range stores {
			if q, ok := st.(quiescer); ok {
				if err := q.Quiesce(qctx); err != nil {
					log.Warn("stopping with background work still running", "err", err)
				}
			}
		}
		stop()
	}()
	err := h.Run(hctx, ln)
	stop()
	<-done
	return err
}

func newClusterUpCmd(g *globals) *cobra.Command {
	var (
		ef       etcdFlags
		dir      string
		nodes    int
		groups   int
		readIOPS float64
		store    string
		memt     int
		stats    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local cluster: an embedded etcd and N nodes, each its own process",
		Long: `up starts an embedded etcd in this process (or uses --etcd), writes the
shard map (with --groups G: G groups g0…g(G-1), each holding an equal slice
of the keys' first byte; else one group, --group, holding every key),
creates each group's chain n1 → … → nN, and starts each node as a separate
"nearstore node serve" process hosting every group, with its stores under
--dir. It prints the etcd endpoint and each node's pid, then runs until
interrupted, stopping the nodes on the way out.`,
		Example: `  nearstore cluster up --dir /tmp/nearstore-cluster --nodes 3`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.sig.set(signalsStop)
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			if dir == "" || nodes < 1 {
				return usageErrorf("--dir and --nodes >= 1 are required")
			}
			if groups < 0 || groups > 256 {
				return usageErrorf("--groups must be 0 to 256")
			}
			gnames := []string{ef.group}
			if groups > 0 {
				gnames = gnames[:0]
				for i := range groups {
					gnames = append(gnames, fmt.Sprintf("g%d", i))
				}
			}
			if ef.endpoints == "" {
				e, err := cluster.StartEmbedded(ctx, cluster.EmbedConfig{Dir: filepath.Join(dir, "etcd")})
				if err != nil {
					return err
				}
				defer e.Close()
				ef.endpoints = strings.Join(e.Endpoints(), ",")
			}
			fmt.Fprintf(out, "etcd %s\n", ef.endpoints)
			ctl, closeCtl, err := ef.control()
			if err != nil {
				return err
			}
			defer closeCtl()
			var ids []string
			for i := 1; i <= nodes; i++ {
				ids = append(ids, fmt.Sprintf("n%d", i))
			}
			m, err := cluster.UniformShards(gnames)
			if err != nil {
				return err
			}
			if _, err := ctl.CreateShardMap(ctx, m); err != nil {
				return err
			}
			for _, gr := range gnames {
				if _, err := ctl.CreateChain(ctx, gr, ids); err != nil {
					return err
				}
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			var procs []*exec.Cmd
			defer func() { proc.InterruptAll(procs) }()
			for _, id := range ids {
				p := exec.Command(self, "node", "serve", "--etcd", ef.endpoints, "--prefix", ef.prefix, "--groups", strings.Join(gnames, ","),
					"--id", id, "--data", filepath.Join(dir, id), "--read-iops", fmt.Sprint(readIOPS), "--log-level", g.logLevel,
					"--store", store, "--memtable-size", fmt.Sprint(memt), "--stats-interval", stats.String())
				p.Stderr = os.Stderr
				p.SysProcAttr = nodeProcAttr()
				so, err := p.StdoutPipe()
				if err != nil {
					return err
				}
				if err := p.Start(); err != nil {
					return err
				}
				procs = append(procs, p)
				rd := bufio.NewReader(so)
				line, err := rd.ReadString('\n')
				if err != nil {
					return fmt.Errorf("node %s: %w", id, err)
				}
				fmt.Fprintf(out, "%s (pid %d)\n", strings.TrimSpace(line), p.Process.Pid)
				go io.Copy(out, rd) // its stats lines
			}
			<-ctx.Done()
			return nil
		},
	}
	ef.add(cmd)
	cmd.Flags().StringVar(&dir, "dir", "", "directory for etcd's and the nodes' data (required)")
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of nodes (each group's chain length)")
	cmd.Flags().IntVar(&groups, "groups", 0, "number of replication groups g0…g(N-1) sharing the key space (0: one group, --group)")
	cmd.Flags().Float64Var(&readIOPS, "read-iops", 0, "each node's modelled device read rate (0: unthrottled)")
	cmd.Flags().StringVar(&store, "store", "lsm", "each node's store: lsm, leed or rubble (as node serve --store)")
	cmd.Flags().IntVar(&memt, "memtable-size", 0, "each node's kv/lsm memtable size in bytes (0: the default)")
	cmd.Flags().DurationVar(&stats, "stats-interval", 0, "each node prints its stats lines this often (node serve --stats-interval; 0: never)")
	return cmd
}

func newClusterStatusCmd() *cobra.Command {
	var ef etcdFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print each group's chain (epoch, members head to tail, joining node), the shard map and the live nodes",
		Long: `status prints one line per group ("group G epoch E chain A -> B -> C",
then "(joining: N)" if a node is joining), then the shard map's ranges
("shard [START, END) group G", keys in Go quoting), then the live nodes. A
cluster without a shard map is the one group --group.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ef.withControl(cmd.Context(), 10*time.Second, func(ctx context.Context, ctl *cluster.Control) error {
				return printStatus(ctx, cmd.OutOrStdout(), ctl, ef.group)
			})
		},
	}
	ef.add(cmd)
	return cmd
}

// printStatus prints "cluster status"'s lines: each group's chain, the
// shard map's ranges, then the live nodes.
func printStatus(ctx context.Context, out io.Writer, ctl *cluster.Control, group string) error {
	m, err := ctl.ShardMap(ctx)
	switch {
	case errors.Is(err, cluster.ErrNoShardMap):
		m = cluster.ShardMap{Shards: []cluster.Shard{{Group: group}}}
	case err != nil:
		return err
	}
	for _, gr := range m.Groups() {
		c, err := ctl.Chain(ctx, gr)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "group %s epoch %d chain %s", c.Group, c.Epoch, strings.Join(c.Members, " -> "))
		if c.Joining != "" {
			fmt.Fprintf(out, " (joining: %s)", c.Joining)
		}
		fmt.Fprintln(out)
	}
	if m.Version > 0 {
		for _, sh := range m.Shards {
			end := "∞"
			if len(sh.End) > 0 {
				end = strconv.Quote(string(sh.End))
			}
			fmt.Fprintf(out, "shard [%q, %s) group %s%s\n", sh.Start, end, sh.Group, shardFlags(sh))
		}
	}
	nodes, err := ctl.Nodes(ctx)
	if err != nil {
		return err
	}
	for _, id := range slices.Sorted(maps.Keys(nodes)) {
		fmt.Fprintf(out, "node %s %s %s\n", id, nodes[id].Addr, strings.Join(nodes[id].Groups, ","))
	}
	return nil
}

func newClusterPutCmd() *cobra.Command {
	var ef etcdFlags
	var del bool
	cmd := &cobra.Command{
		Use:   "put KEY [VALUE]",
		Short: "Write KEY through its group's chain (or delete it with --delete)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if del != (len(args) == 1) {
				return usageErrorf("want KEY VALUE, or KEY with --delete")
			}
			return ef.withClient(cmd.Context(), chain.ReadCRRS, func(ctx context.Context, cl kvClient) error {
				if del {
					return cl.Delete(ctx, []byte(args[0]))
				}
				return cl.Put(ctx, []byte(args[0]), []byte(args[1]))
			})
		},
	}
	ef.add(cmd)
	cmd.Flags().BoolVar(&del, "delete", false, "delete KEY")
	return cmd
}

func newClusterDelCmd() *cobra.Command {
	var ef etcdFlags
	cmd := &cobra.Command{
		Use:   "del KEY",
		Short: "Delete KEY through its group's chain",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return ef.withClient(cmd.Context(), chain.ReadCRRS, func(ctx context.Context, cl kvClient) error {
				return cl.Delete(ctx, []byte(args[0]))
			})
		},
	}
	ef.add(cmd)
	return cmd
}

func newClusterGetCmd() *cobra.Command {
	var ef etcdFlags
	var tail bool
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Read KEY from a clean replica of its group (CRRS), or from the tail with --tail; exit 1 if absent",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mode := chain.ReadCRRS
			if tail {
				mode = chain.ReadTail
			}
			return ef.withClient(cmd.Context(), mode, func(ctx context.Context, cl kvClient) error {
				v, found, err := cl.Get(ctx, []byte(args[0]))
				if err != nil {
					return err
				}
				if !found {
					return fmt.Errorf("%s: not found", args[0])
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n", v)
				return nil
			})
		},
	}
	ef.add(cmd)
	cmd.Flags().BoolVar(&tail, "tail", false, "read at the tail only")
	return cmd
}

func newClusterScanCmd() *cobra.Command {
	var ef etcdFlags
	var limit int
	cmd := &cobra.Command{
		Use:   "scan [START [END]]",
		Short: "Print the keys in [START, END) in key order, one \"KEY VALUE\" line each, read at each group's tail",
		Args:  cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var start, end []byte
			if len(args) > 0 {
				start = []byte(args[0])
			}
			if len(args) > 1 {
				end = []byte(args[1])
				if bytes.Compare(start, end) >= 0 {
					return usageErrorf("START %q is not below END %q", start, end)
				}
			}
			if limit < 0 {
				return usageErrorf("--limit must be >= 0")
			}
			return ef.withClient(cmd.Context(), chain.ReadTail, func(ctx context.Context, cl kvClient) error {
				kvs, err := cl.Scan(ctx, start, end, limit)
				if err != nil {
					return err
				}
				w := bufio.NewWriter(cmd.OutOrStdout())
				for _, kv := range kvs {
					fmt.Fprintf(w, "%s %s\n", kv.Key, kv.Value)
				}
				return w.Flush()
			})
		},
	}
	ef.add(cmd)
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many keys (0: all)")
	return cmd
}

// kvClient is what the KV commands need: chain.Router (a cluster with a
// shard map) or chain.Client (one group).
type kvClient interface {
	Put(ctx context.Context, key, value []byte) error
	Delete(ctx context.Context, key []byte) error
	Get(ctx context.Context, key []byte) ([]byte, bool, error)
	Scan(ctx context.Context, start, end []byte, limit int) ([]chain.KV, error)
	Close() error
}

// withClient runs fn with a client routing by the cluster's shard map
// (or, with none, to --group), within 30 seconds of retries.
func (f *etcdFlags) withClient(ctx context.Context, mode chain.ReadMode, fn func(context.Context, kvClient) error) error {
	return f.withControl(ctx, 30*time.Second, func(ctx context.Context, ctl *cluster.Control) error {
		var cl kvClient
		cl, err := chain.NewRouter(ctx, chain.RouterConfig{Control: ctl, Reads: mode})
		if errors.Is(err, cluster.ErrNoShardMap) {
			cl, err = chain.NewClient(ctx, chain.ClientConfig{Control: ctl, Group: f.group, Reads: mode})
		}
		if err != nil {
			return err
		}
		defer cl.Close()
		return fn(ctx, cl)
	})
}

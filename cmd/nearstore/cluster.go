package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
)

func newClusterCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "A replicated KV cluster: etcd control plane and chain-replicated (CRRS) nodes",
		Long: `cluster runs nearstore's replicated KV cluster (docs/CLUSTER.md): etcd holds
membership, each replication group's chain and its epoch; nodes replicate a
kv/lsm store by chain replication with request shipping.`,
	}
	cmd.AddCommand(newClusterEtcdCmd(g), newClusterNodeCmd(g), newClusterUpCmd(g), newClusterStatusCmd(), newClusterPutCmd(), newClusterGetCmd())
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
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(f.endpoints, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, nil, fmt.Errorf("etcd: %w", err)
	}
	return &cluster.Control{Client: cli, Prefix: f.prefix}, func() { cli.Close() }, nil
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

func newClusterNodeCmd(g *globals) *cobra.Command {
	var (
		ef             etcdFlags
		id, listen     string
		data           string
		readIOPS       float64
		leaseTTL, memt int
		ns             nodeStore
	)
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run one storage node of a replication group (a kv/lsm store replicated by CRRS)",
		Long: `node serves one replica of --group: it opens a kv/lsm store in --data, takes
itself out of the group's chain, registers in etcd with a lease of
--lease-ttl seconds, and joins the chain through a COPY from the tail. It
prints "node ID serving on ADDR" once it listens. SIGINT or SIGTERM stop it
(its lease is revoked); kill -9 leaves the lease to expire.`,
		Example: `  nearstore cluster node --etcd http://127.0.0.1:2379 --id n1 --data /var/lib/nearstore/n1 --listen 127.0.0.1:7001`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.sig.set(signalsStop)
			if id == "" || data == "" {
				return usageErrorf("--id and --data are required")
			}
			ctl, closeCtl, err := ef.control()
			if err != nil {
				return err
			}
			defer closeCtl()
			ctl.Log = g.logger()
			ns.memt = memt
			st, closeStore, err := ns.open(cmd.Context(), data, g.logger())
			if err != nil {
				return err
			}
			defer closeStore()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			n, err := chain.NewNode(chain.NodeConfig{
				ID: id, Group: ef.group, Addr: ln.Addr().String(), Store: st, Control: ctl,
				LeaseTTL: leaseTTL, ReadIOPS: readIOPS, Log: g.logger(),
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s serving on %s\n", id, ln.Addr())
			err = n.Run(cmd.Context(), ln)
			if cmd.Context().Err() != nil {
				return nil
			}
			return err
		},
	}
	ef.add(cmd)
	cmd.Flags().StringVar(&id, "id", "", "node ID (required)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address of the node's chain service")
	cmd.Flags().StringVar(&data, "data", "", "directory of the node's kv/lsm store (required)")
	cmd.Flags().Float64Var(&readIOPS, "read-iops", 0, "model a device admitting this many store reads per second (0: unthrottled)")
	cmd.Flags().IntVar(&leaseTTL, "lease-ttl", 2, "etcd lease in seconds: a dead node leaves the chain this long after")
	cmd.Flags().IntVar(&memt, "memtable-size", 0, "kv/lsm memtable size in bytes (0: the default)")
	ns.flags(cmd.Flags())
	return cmd
}

func newClusterUpCmd(g *globals) *cobra.Command {
	var (
		ef       etcdFlags
		dir      string
		nodes    int
		readIOPS float64
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local cluster: an embedded etcd and N nodes, each its own process",
		Long: `up starts an embedded etcd in this process (or uses --etcd), creates the
group's chain n1 → … → nN, and starts each node as a separate
"nearstore cluster node" process with its store under --dir. It prints the
etcd endpoint and each node's pid, then runs until interrupted, stopping the
nodes on the way out.`,
		Example: `  nearstore cluster up --dir /tmp/nearstore-cluster --nodes 3`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.sig.set(signalsStop)
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			if dir == "" || nodes < 1 {
				return usageErrorf("--dir and --nodes >= 1 are required")
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
			if _, err := ctl.CreateChain(ctx, ef.group, ids); err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			var procs []*exec.Cmd
			defer func() {
				for _, p := range procs {
					p.Process.Signal(os.Interrupt)
				}
				for _, p := range procs {
					p.Wait()
				}
			}()
			for _, id := range ids {
				p := exec.Command(self, "cluster", "node", "--etcd", ef.endpoints, "--prefix", ef.prefix, "--group", ef.group,
					"--id", id, "--data", filepath.Join(dir, id), "--read-iops", fmt.Sprint(readIOPS), "--log-level", g.logLevel)
				p.Stderr = os.Stderr
				so, err := p.StdoutPipe()
				if err != nil {
					return err
				}
				if err := p.Start(); err != nil {
					return err
				}
				procs = append(procs, p)
				line, err := bufio.NewReader(so).ReadString('\n')
				if err != nil {
					return fmt.Errorf("node %s: %w", id, err)
				}
				fmt.Fprintf(out, "%s (pid %d)\n", strings.TrimSpace(line), p.Process.Pid)
			}
			<-ctx.Done()
			return nil
		},
	}
	ef.add(cmd)
	cmd.Flags().StringVar(&dir, "dir", "", "directory for etcd's and the nodes' data (required)")
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of nodes (the chain's length)")
	cmd.Flags().Float64Var(&readIOPS, "read-iops", 0, "each node's modelled device read rate (0: unthrottled)")
	return cmd
}

func newClusterStatusCmd() *cobra.Command {
	var ef etcdFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the group's chain (epoch, members head to tail, joining node) and the live nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctl, closeCtl, err := ef.control()
			if err != nil {
				return err
			}
			defer closeCtl()
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			c, err := ctl.Chain(ctx, ef.group)
			if err != nil {
				return err
			}
			nodes, err := ctl.Nodes(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "group %s epoch %d chain %s", c.Group, c.Epoch, strings.Join(c.Members, " -> "))
			if c.Joining != "" {
				fmt.Fprintf(out, " (joining: %s)", c.Joining)
			}
			fmt.Fprintln(out)
			for id, n := range nodes {
				fmt.Fprintf(out, "node %s %s\n", id, n.Addr)
			}
			return nil
		},
	}
	ef.add(cmd)
	return cmd
}

func newClusterPutCmd() *cobra.Command {
	var ef etcdFlags
	var del bool
	cmd := &cobra.Command{
		Use:   "put KEY [VALUE]",
		Short: "Write KEY through the group's chain (or delete it with --delete)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if del != (len(args) == 1) {
				return usageErrorf("want KEY VALUE, or KEY with --delete")
			}
			cl, done, err := ef.client(cmd.Context(), chain.ReadCRRS)
			if err != nil {
				return err
			}
			defer done()
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			if del {
				return cl.Delete(ctx, []byte(args[0]))
			}
			return cl.Put(ctx, []byte(args[0]), []byte(args[1]))
		},
	}
	ef.add(cmd)
	cmd.Flags().BoolVar(&del, "delete", false, "delete KEY")
	return cmd
}

func newClusterGetCmd() *cobra.Command {
	var ef etcdFlags
	var tail bool
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Read KEY from a clean replica (CRRS), or from the tail with --tail; exit 1 if absent",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mode := chain.ReadCRRS
			if tail {
				mode = chain.ReadTail
			}
			cl, done, err := ef.client(cmd.Context(), mode)
			if err != nil {
				return err
			}
			defer done()
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			v, found, err := cl.Get(ctx, []byte(args[0]))
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("%s: not found", args[0])
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", v)
			return nil
		},
	}
	ef.add(cmd)
	cmd.Flags().BoolVar(&tail, "tail", false, "read at the tail only")
	return cmd
}

func (f *etcdFlags) client(ctx context.Context, mode chain.ReadMode) (*chain.Client, func(), error) {
	ctl, closeCtl, err := f.control()
	if err != nil {
		return nil, nil, err
	}
	cl, err := chain.NewClient(ctx, chain.ClientConfig{Control: ctl, Group: f.group, Reads: mode})
	if err != nil {
		closeCtl()
		return nil, nil, err
	}
	return cl, func() { cl.Close(); closeCtl() }, nil
}

package main

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/bench/chainbench"
)

func newBenchChainCmd() *cobra.Command {
	var (
		cfg chainbench.Config
		rf  reportFlags
	)
	cmd := &cobra.Command{
		Use:   "chain",
		Short: "Chain replication at R = 3: CRRS clean-replica reads against tail-only reads, read-heavy",
		Long: `chain starts an embedded etcd and --nodes "nearstore cluster node" processes
(kv/lsm stores, chain replication with request shipping), loads --keys keys,
and runs a YCSB-B-like workload (--read-fraction reads, the rest updates,
Zipf-distributed keys, every read checked) from --threads goroutines, two
ways in the same run, alternating: CRRS (reads at a random replica, at the
tail only when that replica's copy is dirty) and tail-only. It reports
throughput, p50/p99 latency and where reads were served, run by run and as
medians, and the bar: CRRS at least 1.5× tail-only throughput.

--read-iops models each node's device: at most that many store reads per
second per node (a replica's read capacity, which is what CRRS spreads). 0
leaves the nodes unthrottled, sharing this machine's CPUs with the client.`,
		Example: `  nearstore bench chain --read-iops 2000 --repeat 3 --plot chain.png
  nearstore bench chain --read-iops 0 --duration 5s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runChainBench(cmd, cfg, &rf)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Nodes, "nodes", 3, "chain length R")
	f.IntVar(&cfg.Keys, "keys", 10000, "keys loaded before measuring")
	f.IntVar(&cfg.ValueSize, "value-size", 256, "value size in bytes")
	f.Float64Var(&cfg.ReadFraction, "read-fraction", 0.95, "share of operations that are reads")
	f.IntVar(&cfg.Threads, "threads", 32, "client goroutines, one operation in flight each")
	f.DurationVar(&cfg.Duration, "duration", 3*time.Second, "length of each run")
	f.IntVar(&cfg.Repeat, "repeat", 3, "runs per mode, alternating (medians are reported)")
	f.Float64Var(&cfg.ReadIOPS, "read-iops", 2000, "each node's modelled device read rate (0: unthrottled)")
	f.StringVar(&cfg.Dir, "dir", "", "directory for etcd's and the nodes' data (default: a temporary one)")
	rf.add(f, "the runs' throughput", "print every run, the medians and the bar as JSON")
	return cmd
}

// runChainBench runs chainbench with cfg (this binary as the nodes) and
// prints it as rf says.
func runChainBench(cmd *cobra.Command, cfg chainbench.Config, rf *reportFlags) error {
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Binary = bin
	cfg.Progress = rf.stages(cmd)
	rep, err := chainbench.Run(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	return printReport(rf, cmd.OutOrStdout(), rep, chainbench.WriteTable, chainbench.SavePlot)
}

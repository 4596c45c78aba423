package main

import (
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/bench/rubblebench"
	"github.com/nearstore/nearstore/bench/ycsb"
)

func newBenchRubbleCmd() *cobra.Command {
	var (
		cfg         rubblebench.Config
		rf          reportFlags
		workloads   string
		rubbleStore string
	)
	cmd := &cobra.Command{
		Use:   "rubble",
		Short: "RubbleDB against chain replication: CPU per operation per role under YCSB Load, A, B, F at R = 2, 3, 4",
		Long: `rubble runs a local replicated KV cluster — an etcd ("nearstore cluster
etcd") and R "nearstore node serve" processes, one chain per group — two ways in the
same run: baseline (--store lsm: chain replication, every replica flushes
and compacts) and rubble (--store rubble: only the primary flushes and
compacts and ships its tables into the secondaries' slot pools). For each
R in --replicas and each of --repeat runs, the modes taking turns going
first, it starts a fresh cluster, loads --records records (YCSB Load),
then runs --ops operations of each --workloads workload (every read
checked), and measures per node: CPU time (/proc/PID/stat), TCP bytes
(the kernel's per-socket counters) and the compactions it ran (kv/lsm's
debug lines). It reports medians per mode, R and workload: throughput,
p50/p99, CPU time per operation of the primary (the chain head in etcd),
of a secondary and of the whole group, compactions per role and network
bytes, and the bars: at R = 3 on YCSB A, total CPU per operation at least
30% below the baseline's, and no compaction on a secondary.

The nodes share this machine's CPUs with each other, etcd and the
client, so CPU time per operation is the figure to compare.

A build whose nodes refuse --store rubble reports the mode unavailable and
runs the baseline alone. --rubble-store lsm runs the rubble side as the
baseline (an A/A run: what differences the bench shows between equals).`,
		Example: `  nearstore bench rubble --plot rubble.png
  nearstore bench rubble --replicas 3 --records 20000 --ops 20000 --repeat 3 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Workloads, err = ycsb.Parse(workloads); err != nil {
				return usageErrorf("--workloads: %v", err)
			}
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			cfg.Modes = rubblebench.Modes()
			i := slices.IndexFunc(cfg.Modes, func(m rubblebench.Mode) bool { return m.Name == rubblebench.Rubble })
			cfg.Modes[i].Store = rubbleStore
			cfg.Progress = rf.stages(cmd)
			if !rf.quiet {
				cfg.Counter = func(name string) func(done, total int64) { return countBar(name, "ops") }
			}
			cfg.NodeLog = cmd.ErrOrStderr()
			rep, err := rubblebench.Run(cmd.Context(), cfg)
			if rep == nil {
				return err
			}
			if perr := printReport(&rf, cmd.OutOrStdout(), rep, rubblebench.WriteTable, rubblebench.SavePlot); perr != nil {
				return perr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&cfg.Replicas, "replicas", []int{2, 3, 4}, "chain lengths R to measure")
	f.IntVar(&cfg.Groups, "groups", 1, "replication groups sharing YCSB's key space, each on every node")
	f.IntVar(&cfg.Records, "records", 50000, "records loaded by YCSB Load")
	f.IntVar(&cfg.Ops, "ops", 50000, "operations per workload after Load")
	f.IntVar(&cfg.ValueSize, "value-size", 1024, "value size in bytes")
	f.StringVar(&workloads, "workloads", "A,B,F", "YCSB workloads run after Load (A, B, C, F)")
	f.IntVar(&cfg.Threads, "threads", 16, "client goroutines, one operation in flight each")
	f.IntVar(&cfg.Repeat, "repeat", 3, "runs per mode and R, the modes alternating (medians are reported)")
	f.IntVar(&cfg.MemTableSize, "memtable-size", 1<<20, "the nodes' kv/lsm memtable size in bytes")
	f.IntVar(&cfg.LeaseTTL, "lease-ttl", 10, "the nodes' etcd lease in seconds (long: a node starved of CPU keeps its place in the chains)")
	f.IntVar(&cfg.Retries, "retries", 2, "times a run whose chains changed (a lease lost) is run again (negative: never)")
	f.StringVar(&cfg.Dir, "dir", "", "directory for the clusters' data (default: a temporary one)")
	f.StringVar(&rubbleStore, "rubble-store", "rubble", `the rubble mode's --store ("lsm": an A/A run against the baseline)`)
	rf.add(f, "CPU per operation per role and throughput", "print every phase of every run, the medians and the bars as JSON")
	return cmd
}

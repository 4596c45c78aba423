package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/bench/chainbench"
	"github.com/nearstore/nearstore/bench/leedbench"
)

func newBenchLEEDCmd(_ *globals) *cobra.Command {
	var (
		objects, threads, repeat int
		sizes, scale             []int
		dur                      time.Duration
		capacity                 int64
		rf                       reportFlags
		baseline                 bool
		only                     string
		replicas                 chainbench.Config
	)
	cmd := &cobra.Command{
		Use:   "leed",
		Short: "LEED's store behind the NVMe KV command set against kv/lsm on offloadfs, on simulated NAND",
		Long: `leed serves a KV namespace (LEED's store) and an NVM namespace, each on a
simulated NAND SSD, from a target in this process, and drives both over
NVMe/TCP from the host library: LEED with the KV command set's Store and
Retrieve, and, as a user would today for the same objects, kv/lsm on an
offloadfs on the NVM namespace (--baseline). For each value size it loads
--objects objects, then runs random GET, random PUT and YCSB A–D for
--duration each, --repeat times interleaving the two stores, and reports
median throughput, p50/p99 latency and device I/Os per operation from the
target's counters. It also measures the memory index per object (SegTbl
bytes / objects) at the --scale sizes, on RAM volumes in this process, and
usable capacity: key+value bytes stored until Capacity Exceeded, over the
raw bytes of a --capacity store. YCSB's keys map into 16 bytes as FNV-1a 64
of "user<n>" followed by n.`,
		Example: `  nearstore bench leed --plot leed.png
  nearstore bench leed --objects 200000 --scale 100000,1000000,3000000 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if only != "" && only != "scale" && only != "capacity" {
				return usageErrorf("--only %q: want scale or capacity", only)
			}
			if replicas.Nodes > 0 {
				return runLEEDReplicas(cmd, replicas, &rf)
			}
			cfg := leedbench.Config{Objects: objects, ValueSizes: sizes, Threads: threads, Duration: dur, Repeat: repeat,
				ScaleObjects: scale, Only: only, CapacityBytes: capacity, Baseline: baseline}
			if !rf.quiet {
				cfg.Progress = cmd.ErrOrStderr()
			}
			rep, err := leedbench.Run(cmd.Context(), cfg)
			if rep == nil {
				return err
			}
			return printPartial(&rf, out, rep, err, leedbench.WriteTable, leedbench.SavePlot)
		},
	}
	f := cmd.Flags()
	f.IntVar(&objects, "objects", 50000, "objects loaded into each store before the timed phases")
	f.IntSliceVar(&sizes, "value-sizes", []int{256, 1024}, "value sizes in bytes")
	f.IntVar(&threads, "threads", 16, "goroutines issuing operations, one in flight each")
	f.DurationVar(&dur, "duration", 3*time.Second, "length of each timed phase")
	f.IntVar(&repeat, "repeat", 3, "runs of every phase, interleaved; the report gives medians")
	f.IntSliceVar(&scale, "scale", []int{100000, 1000000}, "store sizes (objects) at which to measure memory per object")
	f.StringVar(&only, "only", "", `"scale": measure only memory per object at the --scale sizes (of the first --value-sizes size); "capacity": only usable capacity`)
	f.Int64Var(&capacity, "capacity", 256<<20, "raw bytes of the store filled to measure usable capacity")
	f.BoolVar(&baseline, "baseline", true, "also run kv/lsm on offloadfs over NVMe/TCP")
	rf.add(f, "throughput per workload", "print every run, the medians and the bars as JSON")
	f.IntVar(&replicas.Nodes, "replicas", 0, "instead, run LEED replicated by CRRS at R = this (bench chain's experiment with --store leed nodes): CRRS reads against tail-only reads")
	f.IntVar(&replicas.Keys, "replica-keys", 10000, "with --replicas: keys loaded")
	f.Float64Var(&replicas.ReadIOPS, "read-iops", 2000, "with --replicas: each node's modelled device read rate (0: unthrottled)")
	f.Float64Var(&replicas.ReadFraction, "read-fraction", 0.95, "with --replicas: share of operations that are reads")
	return cmd
}

// runLEEDReplicas is bench leed --replicas: bench chain's CRRS experiment
// with every node's replica a LEED store, sharing its flags for
// duration, repeat, threads and value size with bench leed's.
func runLEEDReplicas(cmd *cobra.Command, cfg chainbench.Config, rf *reportFlags) error {
	f := cmd.Flags()
	cfg.Duration, _ = f.GetDuration("duration")
	cfg.Repeat, _ = f.GetInt("repeat")
	if f.Changed("threads") {
		cfg.Threads, _ = f.GetInt("threads")
	}
	if sizes, _ := f.GetIntSlice("value-sizes"); f.Changed("value-sizes") && len(sizes) > 0 {
		cfg.ValueSize = sizes[0]
	}
	cfg.Store = "leed"
	cfg.NodeArgs = []string{"--store", "leed", "--leed-size", "256MiB"}
	return runChainBench(cmd, cfg, rf)
}

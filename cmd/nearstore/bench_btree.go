package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nearstore/nearstore/bench/btreebench"
	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/kv/btree"
	"github.com/nearstore/nearstore/volume"
)

func newBenchBTreeCmd(g *globals) *cobra.Command {
	var (
		keys, mode, sweep, device, rt    string
		fanout, levels, valueSize, cache int
		repeat, queues                   int
		threads                          []int
		dur                              time.Duration
		proc                             procFlags
		rf                               reportFlags
	)
	cmd := &cobra.Command{
		Use:   "btree",
		Short: "BPF-KV on nearstore: B+-tree lookups read by the host against pushed down to the target",
		Long: `btree measures BPF-KV point lookups two ways on the same tree. A target
serves a device (RAM, or an SSD simulated with NAND's or Optane's latency);
the host makes an offloadfs on it and bulk-loads a B+-tree of --keys keys in
BPF-KV's format (512-byte nodes, 64-byte values in a value log), caching the
top --cache-levels levels in memory. Then it looks up random keys from
--threads goroutines, one lookup in flight each, checking every value:

  plain     the host reads each uncached node, then the value: one NVMe read
            (one network round trip) per level;
  pushdown  one Pushdown Read per lookup runs btree_lookup at the target from
            the first uncached level down and into the value log.

For each mode and thread count it reports throughput, p50/p99 latency, round
trips per lookup (the target's command counters), CPU per lookup on the host
and on the target, and network bytes per lookup. Throughput is compared at
saturation: --sweep raises the threads until a mode's throughput stops
growing (auto: doubling from 1 until three points add less than 5%), and the
report and the plot show the whole curve.

By default the target runs as its own process ("nearstore target serve"), so
its CPU time is its own; pin it and this process to different CPUs with
--server-cpus and --client-cpus on a small machine. --fanout 0 picks the
largest fanout that makes the tree --levels deep (6 levels from a million
keys needs fanout 15; BPF-KV's full 31 would need 30 million).`,
		Example: `  nearstore bench btree --mode both --cache-levels 0 --sweep auto --device nand --server-cpus 1 --client-cpus 0 --plot btree.png
  nearstore bench btree --keys 1Mi --cache-levels 3 --threads 64 --duration 5s --json
  nearstore bench btree --device mem --mode pushdown --runtime ebpf --in-process --cpuprofile host.pprof`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			n, err := parseCount(keys)
			if err != nil {
				return fmt.Errorf("--keys: %w", err)
			}
			cfg := btreebench.Config{
				Keys: n, Fanout: fanout, MinLevels: levels, ValueSize: valueSize, CacheLevels: cache,
				Threads: threads, Duration: dur, Repeat: repeat, Device: device, Queues: queues,
			}
			if cfg.Modes, err = parseModes(mode); err != nil {
				return err
			}
			if cfg.Runtime, err = parseKind("--runtime", rt); err != nil {
				return err
			}
			switch s := strings.TrimSpace(sweep); s {
			case "":
			case "auto":
				cfg.AutoSweep = true
			default:
				if cfg.Threads, err = parseInts(s); err != nil {
					return fmt.Errorf("--sweep: %w", err)
				}
			}
			bp, err := proc.start(cmd, g)
			if err != nil {
				return err
			}
			defer bp.stopProfile()
			cfg.TargetExe, cfg.ServerCPUs, cfg.Logger = bp.exe, proc.serverCPUs, bp.logger
			if cfg.Progress = rf.stages(cmd); cfg.Progress != nil {
				cfg.LoadProgress = loadBar("load ")
				cfg.RunBar = rateBar("lookups/s")
			}
			rep, err := btreebench.Run(ctx, cfg)
			if rep == nil || len(rep.Points) == 0 {
				return err
			}
			rep.Machine.Pinning = bp.pinning
			return printPartial(&rf, out, rep, err, btreebench.WriteTable, btreebench.SavePlot)
		},
	}
	f := cmd.Flags()
	f.StringVar(&keys, "keys", "1M", "keys to load (1000000, 1MB = 10^6, 1M = 2^20, 64k, ...)")
	f.IntVar(&fanout, "fanout", 0, "most keys per node, 2 to 31 (0: the largest that gives --levels levels)")
	f.IntVar(&levels, "levels", btreebench.DefaultBTreeMinLevels, "tree depth --fanout 0 aims for")
	f.IntVar(&valueSize, "value-size", btree.DefaultValueSize, "value size in bytes")
	f.IntVar(&cache, "cache-levels", 0, "top levels cached on the host (0: none)")
	f.StringVar(&mode, "mode", "both", "plain, pushdown or both")
	f.IntSliceVar(&threads, "threads", []int{btreebench.DefaultBTreeThreads}, "lookups in flight (goroutines); a list measures each")
	f.StringVar(&sweep, "sweep", "", `thread counts to sweep ("1,4,16,64") or "auto"; overrides --threads`)
	f.DurationVar(&dur, "duration", 3*time.Second, "length of each run")
	f.IntVar(&repeat, "repeat", 3, "runs per mode and thread count (medians are reported)")
	f.StringVar(&device, "device", btreebench.DeviceNAND, "target device: mem, nand or optane (simulated SSDs)")
	f.StringVar(&rt, "runtime", "ebpf", "btree_lookup's runtime at the target: ebpf or wasm")
	f.IntVar(&queues, "queues", 1, "host I/O queues (TCP connections)")
	proc.add(f, "run the target in this process (CPU per side is then not separable)")
	rf.add(f, "throughput against p99 latency", "print every run and the medians as JSON")
	return cmd
}

// parseModes reads plain, pushdown or both.
func parseModes(s string) ([]btree.Mode, error) {
	if strings.TrimSpace(s) == "both" {
		return []btree.Mode{btree.Plain, btree.Pushdown}, nil
	}
	m, err := btree.ParseMode(s)
	if err != nil {
		return nil, fmt.Errorf("--mode %q: want plain, pushdown or both", s)
	}
	return []btree.Mode{m}, nil
}

// parseCount reads a count the way every size flag reads a size
// (volume.ParseSize), so one suffix means one thing on every flag: k, M,
// G, Ki, Mi, Gi (KiB, MiB, GiB) are powers of 1024, KB, MB, GB powers of
// 1000. "1M" keys are 1,048,576; "1MB" or 1000000 are a million.
func parseCount(s string) (int64, error) {
	n, err := volume.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("bad count %q: want a number with an optional suffix, e.g. 1000000, 1MB (10^6), 1M (2^20)", s)
	}
	return n, nil
}

// parseInts reads a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q in %q", part, s)
		}
		out = append(out, n)
	}
	return out, nil
}

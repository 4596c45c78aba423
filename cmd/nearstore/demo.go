package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nearstore/nearstore/bench/btreebench"
	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/iocheck"
)

func newDemoCmd(g *globals) *cobra.Command {
	var (
		keys, device string
		dur          time.Duration
		threads      []int
		cache        int
		verify       bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "BPF-KV on an embedded target: B+-tree lookups read by the host against pushed down",
		Long: `demo runs the whole system in one process and leaves nothing behind. An
NVMe/TCP target serves an SSD simulated in RAM (NAND: 90 µs reads) on a
loopback port; nearstore's host library connects to it over real TCP, checks
the data plane with a short verify, makes an offloadfs on the namespace and
bulk-loads BPF-KV — a B+-tree of about a million keys, six levels deep, with
64-byte values in a value log. Then it looks up random keys for a few seconds
each way, checking every value:

  plain     the host reads every node over NVMe/TCP itself, then the value;
  pushdown  one Pushdown Read per lookup runs btree_lookup (wasm) at the
            target, down the tree and into the value log.

It prints throughput, latency, network round trips per lookup (the target's
command counters) and CPU per lookup for both. "nearstore bench btree" runs
the same measurement with the target in its own process, pinned, with a
thread sweep and a plot.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			n, err := parseCount(keys)
			if err != nil {
				return fmt.Errorf("--keys: %w", err)
			}
			log := benchLogger(cmd, g)
			start := time.Now()
			cfg := btreebench.Config{
				Keys: n, CacheLevels: cache, Device: device, Threads: threads, Duration: dur, Repeat: 1, Logger: log,
				Progress: func(stage string) { fmt.Fprintf(out, "· %s\n", stage) },
				RunBar:   rateBar("lookups/s"),
			}
			if verify {
				cfg.Prepare = func(ctx context.Context, ns *host.Namespace) error {
					return demoVerify(ctx, out, ns)
				}
			}
			cfg.LoadProgress = loadBar("  load ")
			rep, err := btreebench.Run(ctx, cfg)
			if err != nil {
				if errors.Is(err, context.Canceled) {
					return nil
				}
				return err
			}
			if err := printDemo(out, rep); err != nil {
				return err
			}
			fmt.Fprintf(out, "\n(%.0fs in all; `nearstore bench btree` measures this with the target in its own process, pinned, with a thread sweep and a plot)\n",
				time.Since(start).Seconds())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&keys, "keys", "1M", "keys to load")
	f.StringVar(&device, "device", btreebench.DeviceNAND, "the target's device: nand, optane (simulated SSDs) or mem")
	f.IntVar(&cache, "cache-levels", 0, "top levels of the tree cached on the host")
	f.IntSliceVar(&threads, "threads", []int{16, 32, 64}, "lookups in flight; each mode's best is reported")
	f.DurationVar(&dur, "duration", time.Second, "length of each run")
	f.BoolVar(&verify, "verify", true, "verify the data plane (8 MiB of patterns) before loading")
	return cmd
}

// demoVerify writes and reads back patterns over the start of the
// namespace through every I/O path, before the file system goes there.
func demoVerify(ctx context.Context, out io.Writer, ns *host.Namespace) error {
	rep := iocheck.Run(ctx, ns, iocheck.Options{Size: min(ns.Size(), 8<<20)})
	if !rep.OK {
		if err := printVerify(out, rep, false); err != nil {
			return err
		}
		return errors.New("verify failed")
	}
	fmt.Fprintf(out, "· verify: %d checks of the data plane passed (aligned, unaligned, large transfers, zeroes, flush)\n", len(rep.Steps))
	return nil
}

// printDemo prints each mode's best point and what the difference means.
func printDemo(w io.Writer, r *btreebench.Report) error {
	t := r.Tree
	fmt.Fprintf(w, "\nBPF-KV: %d keys, %d levels of %d-byte nodes (fanout %d), %d-byte values, %s; target on %s\n",
		t.Keys, t.Depth, 512, t.Fanout, t.ValueSize, cacheLabel(t.CacheLevels), r.Volume)
	fmt.Fprintf(w, "loaded into offloadfs in %.1fs; host and target share this process (CPU is the whole process's)\n\n", r.Load.Seconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tthreads\tlookups/s\tp50 µs\tp99 µs\tround trips/lookup\tCPU µs/lookup\tbytes/lookup\t")
	for _, p := range r.Saturated {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.2f\t%.1f\t%.0f\t\n", p.Mode, p.Threads, p.OpsPerSec, p.P50us, p.P99us, p.RoundTrips, p.TotalCPUus, p.NetBytes)
	}
	x := r.Ratios
	var plain, push btreebench.BTreePoint
	for _, p := range r.Saturated {
		switch p.Mode {
		case "plain":
			plain = p
		case "pushdown":
			push = p
		}
	}
	if x != nil {
		// Latencies compare only at equal load: the same threads.
		p50, p99 := "-", "-"
		if plain.Threads == push.Threads && push.P50us > 0 && push.P99us > 0 {
			p50, p99 = fmt.Sprintf("%.2f×", plain.P50us/push.P50us), fmt.Sprintf("%.2f×", plain.P99us/push.P99us)
		}
		fmt.Fprintf(tw, "pushdown vs plain\t\t%.2f×\t%s\t%s\t%.1f× fewer\t%.2f× less\t%.2f×\t\n",
			x.Throughput, p50, p99, x.RoundTrips, x.TotalCPU, x.NetBytes)
	}
	if err := tw.Flush(); err != nil || x == nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nWhat it means: a plain lookup pays %.0f network round trips, each costing CPU at both ends and a wait; "+
		"pushdown walks the tree next to the data and pays one, which here bought %.2f× the lookups per second for %.2f× less CPU each.\n",
		plain.RoundTrips, x.Throughput, x.TotalCPU)
	return err
}

func cacheLabel(levels int) string {
	switch levels {
	case 0:
		return "nothing cached on the host"
	case 1:
		return "the root cached on the host"
	}
	return fmt.Sprintf("top %d levels cached on the host", levels)
}

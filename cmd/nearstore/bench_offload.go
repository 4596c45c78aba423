package main

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/nearstore/nearstore/bench/offloadbench"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newBenchPrepCmd(g *globals) *cobra.Command {
	var (
		cfg   offloadbench.PrepConfig
		modes string
		of    offloadbenchFlags
	)
	cmd := &cobra.Command{
		Use:   "prep",
		Short: "OffloadPrep: images per second on the host, the storage node, a peer, and split",
		Long: `prep runs "nearstore target serve --offload" as its own process (the storage
node, with an engine reading the volume directly) and "nearstore offload
serve" as another (a peer engine over NVMe/TCP), writes a synthetic
ImageNet-like set into an offloadfs, and preprocesses the whole set from
this process, limited to --host-procs cores (Go's GOMAXPROCS), in each
mode: host, target, peer, split (host and target take batches as they
are free). The modes take turns, ABCD DCBA. It reports medians of images
per second and this process's CPU per image, and the bar: offloading to
the storage node (or splitting) at least 1.5× the host-only rate. --link
RATE puts the target behind an emulated link (as bench link: a network
namespace and a tc-shaped veth pair; loopback where that cannot be made,
and the report says so).`,
		Example: `  nearstore bench prep --images 400 --repeat 3 --plot prep.png
  nearstore bench prep --modes host,target --link 10gbit --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Modes = splitList(modes)
			return runOffloadbench(cmd, g, &of, func(ctx context.Context, p offloadbench.Process) (*offloadbench.PrepReport, error) {
				cfg.Process = p
				return offloadbench.RunPrep(ctx, cfg)
			}, offloadbench.WritePrepTable, offloadbench.SavePrepPlot)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Images, "images", 400, "synthetic images in the set")
	f.IntVar(&cfg.Size, "size", 224, "output side in pixels")
	f.IntVar(&cfg.Batch, "batch", 8, "images per offloaded task")
	f.IntVar(&cfg.Repeat, "repeat", 3, "runs per mode (medians are reported)")
	f.IntVar(&cfg.HostProcs, "host-procs", 1, "cores (GOMAXPROCS) this process, the host, may use")
	f.StringVar(&modes, "modes", "host,target,peer,split", "modes to run, comma separated")
	f.StringVar(&cfg.Link, "link", "", "emulated link to the target, e.g. 10gbit (default: loopback)")
	of.add(f, "images/s per mode", "print every run, the medians and the bars as JSON")
	return cmd
}

func newBenchOffloadCmd(g *globals) *cobra.Command {
	var (
		cfg      offloadbench.Config
		policies string
		of       offloadbenchFlags
	)
	cmd := &cobra.Command{
		Use:   "offload",
		Short: "Clients offloading at once under each admission policy: fairness and CPU protection",
		Long: `offload runs "nearstore target serve --offload" as its own process and
--clients clients in this process offloading OffloadPrep batches to its
engine at once for --duration, under each policy: none, cpu (the engine
turns tasks away while the target process uses more than
--cpu-threshold of the machine; those run on their client), and tokens
(--tokens tokens circulate, a fair share each). It reports each client's
tasks on the engine and locally, Jain's index over the engine's tasks per
client, the target's CPU share (median, 90th percentile, max of 200ms
samples), and the bars: under tokens Jain's index at least 0.99, under cpu
the target's median CPU under its threshold with every task completed.`,
		Example: `  nearstore bench offload --duration 10s --plot offload.png
  nearstore bench offload --policies tokens --clients 3 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Policies = splitList(policies)
			return runOffloadbench(cmd, g, &of, func(ctx context.Context, p offloadbench.Process) (*offloadbench.Report, error) {
				cfg.Process = p
				return offloadbench.Run(ctx, cfg)
			}, offloadbench.WriteTable, offloadbench.SavePlot)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Clients, "clients", 2, "clients offloading at once")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "length of each policy's run")
	f.StringVar(&policies, "policies", "none,cpu,tokens", "policies to run, comma separated")
	f.Float64Var(&cfg.CPUThreshold, "cpu-threshold", 0.5, "cpu policy: the target process's share of the machine above which tasks are turned away")
	f.IntVar(&cfg.Tokens, "tokens", 2, "tokens policy: tokens in circulation")
	f.IntVar(&cfg.Images, "images", 32, "synthetic images the tasks preprocess")
	f.IntVar(&cfg.Size, "size", 128, "OffloadPrep output side")
	f.IntVar(&cfg.Batch, "batch", 4, "images per task")
	of.add(f, "tasks per client and policy", "print the runs and the bars as JSON")
	return cmd
}

// offloadbenchFlags are the flags of both offloadbench experiments, whose
// target runs as its own process: the process's (procFlags; --in-process
// is refused) and the report's.
type offloadbenchFlags struct {
	proc procFlags
	rf   reportFlags
}

// add registers the flags; plotWhat and jsonWhat are reportFlags.add's.
func (o *offloadbenchFlags) add(f *pflag.FlagSet, plotWhat, jsonWhat string) {
	o.proc.add(f, "not supported: the target runs as its own process")
	o.rf.add(f, plotWhat, jsonWhat)
}

// runOffloadbench runs an offloadbench experiment as o says: it starts
// the bench process (pinning, CPU profile), gives run the experiment's
// Process (this binary as the target, the logger, the stages on stderr
// unless --quiet), and prints run's report with table and plot.
func runOffloadbench[R any](cmd *cobra.Command, g *globals, o *offloadbenchFlags, run func(context.Context, offloadbench.Process) (R, error),
	table func(io.Writer, R) error, plot func(string, R) error) error {
	bp, err := o.proc.startOwn(cmd, g)
	if err != nil {
		return err
	}
	defer bp.stopProfile()
	rep, err := run(cmd.Context(), offloadbench.Process{
		TargetExe: bp.exe, ServerCPUs: o.proc.serverCPUs, Pinning: bp.pinning, Logger: bp.logger, Progress: o.rf.stages(cmd),
	})
	if err != nil {
		return err
	}
	return printReport(&o.rf, cmd.OutOrStdout(), rep, table, plot)
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

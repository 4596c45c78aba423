package main

import (
	"errors"
	"time"

	"github.com/nearstore/nearstore/bench/isolationbench"
	"github.com/spf13/cobra"
)

// newBenchIsolationCmd measures one host's plain reads beside another
// host's looping functions.
func newBenchIsolationCmd(g *globals) *cobra.Command {
	var (
		repeat, looping int
		dur             time.Duration
		targetArgs      []string
		rf              reportFlags
		proc            procFlags
	)
	cmd := &cobra.Command{
		Use:   "isolation",
		Short: "One host's 4 KiB QD1 reads, alone and while another host keeps looping functions in flight",
		Long: `isolation measures whether a target keeps one host's plain I/O flowing
while another host keeps its CPUs busy with functions. "nearstore target
serve" runs as its own process on a memory volume. Host B reads random
4 KiB blocks one at a time for --duration, first alone (idle), then while
host A keeps --looping λ reads in flight of a function that never returns
(loaded): each runs until the target's function time limit ends it, and A
sends the next at once. The phases alternate over --repeat repetitions;
the table gives the medians of B's IOPS, p50 and p99, and the target's CPU
use. The bars: loaded IOPS at least half of idle, loaded p99 under 2 ms.
--target-arg passes a flag to the target (its function scheduling flags,
say).`,
		Example: `  nearstore bench isolation --repeat 5 --plot isolation.png
  nearstore bench isolation --json --target-arg=--func-workers=1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if proc.inProcess {
				return errors.New("--in-process: the target must run as its own process here")
			}
			cfg := isolationbench.Config{Duration: dur, Repeat: repeat, Looping: looping, TargetArgs: targetArgs}
			bp, err := proc.start(cmd, g)
			if err != nil {
				return err
			}
			cfg.TargetExe, cfg.Pinning, cfg.ServerCPUs, cfg.Logger = bp.exe, bp.pinning, proc.serverCPUs, bp.logger
			cfg.Progress = rf.stages(cmd)
			rep, err := isolationbench.Run(cmd.Context(), cfg)
			bp.stopProfile()
			if err != nil {
				return err
			}
			return printReport(&rf, cmd.OutOrStdout(), rep, isolationbench.WriteTable, isolationbench.SavePlot)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&dur, "duration", 3*time.Second, "length of each phase")
	f.IntVar(&repeat, "repeat", 3, "idle and loaded phases each (medians are reported)")
	f.IntVar(&looping, "looping", 64, "looping λ reads host A keeps in flight")
	f.StringArrayVar(&targetArgs, "target-arg", nil, "add this argument to the target's command line (repeatable)")
	rf.add(f, "a bar chart of the medians", "print every phase, the medians and the bars as JSON")
	proc.add(f, "not supported: the target runs as its own process")
	return cmd
}

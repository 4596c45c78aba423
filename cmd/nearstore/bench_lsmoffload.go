package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nearstore/nearstore/bench/lsmbench"
)

// lsmOffloadFlags are `bench lsm`'s flags for the OffloadDB experiment
// (--offload): kv/lsm with its flushes and compactions at the target's
// offload engine, against itself without and Pebble, on offloadfs over
// NVMe/TCP (bench/lsmbench, RunOffload).
type lsmOffloadFlags struct {
	modes string
	// The CPUs each side may use: --client-cpus and --server-cpus,
	// shared with --mode.
	clientCPUs, serverCPUs *string
}

const lsmOffloadHelp = `With --offload (none, compaction, compaction+recycle, all, pebble;
comma-separated) it runs the
OffloadDB experiment instead: each mode's store on an offloadfs that a
target in its own process serves from a simulated NAND SSD, with the
target's offload engine in its process (target serve --offload); none
is kv/lsm compacting on the host, compaction sends its compactions to the
engine, compaction+recycle its flushes too (log recycling: the engine
writes each L0 table from the WAL), all adds the L0 cache (flushed
memtables, four memtables' worth, answer Gets in their L0 tables' place),
pebble is Pebble v2 on the same kind of file system. Each store
gets a fresh target; the modes take turns going first. Load, then
--workloads (default A,fillrandom here) as above, reporting in addition
the bytes over the host's NVMe/TCP connection per byte written, reads'
p99 while compactions run, and where compactions ran. Shared flags left
unset take this experiment's defaults (100000 records, 50000 ops, 4 MiB
memtables, 8 MiB cache). Bars (Load, fullest mode ÷ none): throughput at
least 1.4x, host CPU per write lower, network bytes per byte written at
most 0.6x.`

func (f *lsmOffloadFlags) add(fs *pflag.FlagSet, push *lsmPushFlags) {
	fs.StringVar(&f.modes, "offload", "", "OffloadDB modes to measure side by side: none, compaction, compaction+recycle, all, pebble (comma-separated; see above)")
	f.clientCPUs, f.serverCPUs = &push.clientCPUs, &push.serverCPUs
}

// run runs the experiment with cfg's shared flags; those not given take
// the experiment's defaults.
func (f *lsmOffloadFlags) run(cmd *cobra.Command, g *globals, cfg lsmbench.Config, workloads, cpuprof string, asJSON bool, plotFile string) error {
	for name, v := range map[string]func(){
		"records": func() { cfg.Records = 0 }, "ops": func() { cfg.Ops = 0 }, "memtable": func() { cfg.MemTable = 0 },
		"cache": func() { cfg.Cache = 0 }, "workloads": func() { workloads = "" },
	} {
		if fl := cmd.Flag(name); fl == nil || !fl.Changed {
			v()
		}
	}
	oc := lsmbench.OffloadConfig{Config: cfg, Modes: splitList(f.modes), ServerCPUs: *f.serverCPUs}
	if workloads != "" {
		var err error
		if oc.Workloads, err = lsmbench.ParseWorkloads(workloads); err != nil {
			return usageErrorf("--workloads: %v", err)
		}
	}
	proc := procFlags{clientCPUs: *f.clientCPUs, serverCPUs: *f.serverCPUs, cpuprof: cpuprof}
	bp, err := proc.start(cmd, g)
	if err != nil {
		return err
	}
	defer bp.stopProfile()
	if bp.exe == "" {
		return fmt.Errorf("--offload needs the target in its own process")
	}
	oc.TargetExe, oc.Logger, oc.Progress = bp.exe, bp.logger, cmd.ErrOrStderr()
	rep, err := lsmbench.RunOffload(cmd.Context(), oc)
	if err != nil {
		return err
	}
	rep.Machine.Pinning = bp.pinning
	return benchOutput(cmd, asJSON, plotFile, rep,
		func() error { return rep.Print(cmd.OutOrStdout()) },
		func() error { return lsmbench.SavePlot(plotFile, rep) })
}

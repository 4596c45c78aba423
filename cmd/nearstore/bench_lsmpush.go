package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nearstore/nearstore/bench/lsmpushbench"
)

// lsmPushFlags are `bench lsm`'s flags for its NVMe/TCP modes (--mode):
// kv/lsm plain and pushed down, and Pebble, on an offloadfs served by a
// target process from simulated NAND (package bench/lsmpushbench).
type lsmPushFlags struct {
	mode, rates            string
	dists, runtimes, conc  string
	duration               time.Duration
	clientCPUs, serverCPUs string
	targetProf             string
}

const lsmPushHelp = `With --mode (plain, pushdown, pebble, comma-separated) it measures instead
Gets over NVMe/TCP: the records are loaded into kv/lsm (and Pebble, with
mode pebble) on an offloadfs that a target in its own process serves from a
simulated NAND SSD (90 µs reads); then each of --workloads (default C
here; C: 100% reads, B: 95% reads and 5% updates, A: 50% reads and 50%
updates, F: 50% reads and 50% read-modify-writes, with --dist keys
(uniform, zipfian), D: 95% reads of the latest records and 5% inserts; Load reports the load
itself, once per store, one writer) runs for --duration per run with --threads Gets in flight, the
modes interleaved run by run, --repeat times, every value read checked.
plain is kv/lsm reading blocks on the host; pushdown splits each Get and
sends its on-disk part as one lsm_get pushdown, run at the target in each of
--runtime (wasm, ebpf), with --sample-rates the cache-sampling sweep; pebble is Pebble v2 on the same offloadfs. It reports
throughput, p50/p99/p99.9, NVMe commands, host and target CPU and network bytes
per operation, and the block-cache hit rate; --concurrency measures every
variant at each number of Gets in flight. Bars, at each mode's best
concurrency (saturation): pushdown at least 2x plain's YCSB C throughput with fewer round trips and less CPU per Get, and
at least 1.5x Pebble's. --cache is the host's block cache (kv/lsm pins
indexes and filters outside it).`

func (f *lsmPushFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.mode, "mode", "", "NVMe/TCP modes to measure: plain, pushdown, pebble (comma-separated; see above)")
	fs.StringVar(&f.rates, "sample-rates", "0.01", "with --mode pushdown: cache-sampling rates to sweep, comma-separated")
	fs.StringVar(&f.dists, "dist", "uniform", "with --mode: key distributions of A, B, C and F: uniform, zipfian (comma-separated)")
	fs.StringVar(&f.runtimes, "runtime", "wasm", "with --mode pushdown: runtimes lsm_get runs in at the target: wasm, ebpf (comma-separated)")
	fs.StringVar(&f.conc, "concurrency", "", "with --mode: Gets in flight to sweep, comma-separated (default: --threads)")
	fs.DurationVar(&f.duration, "duration", 3*time.Second, "with --mode: length of each timed run")
	fs.StringVar(&f.clientCPUs, "client-cpus", "", "with --mode: pin this process (the host) to these CPUs (taskset list)")
	fs.StringVar(&f.serverCPUs, "server-cpus", "", "with --mode: pin the target process to these CPUs (taskset list)")
	fs.StringVar(&f.targetProf, "target-cpuprofile", "", "with --mode: write a CPU profile of the target process (load and runs) to this file")
}

// lsmPushArgs are the flags `bench lsm` shares with the NVMe/TCP modes.
type lsmPushArgs struct {
	records         uint64
	valueSize       int
	threads, repeat int
	cache           int64
	workloads       string
	cpuprof         string
	asJSON          bool
	plotFile        string
}

// run runs the NVMe/TCP modes. Shared flags left unset take the
// experiment's defaults (bench/lsmpushbench), not the local comparison's.
func (f *lsmPushFlags) run(cmd *cobra.Command, g *globals, a lsmPushArgs) error {
	for name, v := range map[string]func(){
		"records": func() { a.records = 0 }, "value-size": func() { a.valueSize = 0 },
		"threads": func() { a.threads = 0 }, "repeat": func() { a.repeat = 0 }, "cache": func() { a.cache = 0 },
	} {
		if fl := cmd.Flag(name); fl == nil || !fl.Changed {
			v()
		}
	}
	cfg := lsmpushbench.Config{
		Records: int(a.records), ValueSize: a.valueSize, Threads: a.threads, Repeat: a.repeat,
		Duration: f.duration, BlockCache: a.cache,
		Modes: splitList(f.mode), Workloads: splitList(a.workloads),
	}
	if fl := cmd.Flag("workloads"); fl == nil || !fl.Changed {
		cfg.Workloads = []string{"C"}
	}
	for _, r := range splitList(f.rates) {
		x, err := strconv.ParseFloat(r, 64)
		if err != nil || x < 0 || x > 1 {
			return fmt.Errorf("--sample-rates: %q is not a rate in [0, 1]", r)
		}
		cfg.SampleRates = append(cfg.SampleRates, x)
	}
	cfg.Dists = splitList(f.dists)
	for _, r := range splitList(f.runtimes) {
		k, err := parseKind("--runtime", r)
		if err != nil {
			return err
		}
		cfg.Runtimes = append(cfg.Runtimes, k)
	}
	for _, c := range splitList(f.conc) {
		n, err := strconv.Atoi(c)
		if err != nil || n <= 0 {
			return fmt.Errorf("--concurrency: %q is not a positive number of Gets in flight", c)
		}
		cfg.Concurrency = append(cfg.Concurrency, n)
	}
	proc := procFlags{clientCPUs: f.clientCPUs, serverCPUs: f.serverCPUs, cpuprof: a.cpuprof}
	bp, err := proc.start(cmd, g)
	if err != nil {
		return err
	}
	defer bp.stopProfile()
	cfg.TargetExe, cfg.ServerCPUs, cfg.Logger = bp.exe, f.serverCPUs, bp.logger
	cfg.TargetCPUProfile = f.targetProf
	stderr := cmd.ErrOrStderr()
	cfg.Progress = func(stage string) { fmt.Fprintf(stderr, "… %s\n", stage) }
	rep, err := lsmpushbench.Run(cmd.Context(), cfg)
	if rep == nil {
		return err
	}
	rep.Machine.Pinning = bp.pinning
	if err != nil { // a run failed: print what was measured, then the error
		_ = lsmpushbench.Print(cmd.OutOrStdout(), rep)
		return err
	}
	return benchOutput(cmd, a.asJSON, a.plotFile, rep,
		func() error { return lsmpushbench.Print(cmd.OutOrStdout(), rep) },
		func() error { return lsmpushbench.SavePlot(a.plotFile, rep) })
}

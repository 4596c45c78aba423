package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/nearstore/nearstore/bench/funcbench"
	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/volume"
)

func newBenchFuncCmd(*globals) *cobra.Command {
	var (
		fn, size, runtimes        string
		dur                       time.Duration
		iterations, repeat, chain int
		noChain                   bool
		rf                        reportFlags
	)
	cmd := &cobra.Command{
		Use:   "func",
		Short: "Storage functions: wasm and eBPF against native Go, and a pushdown chain against the host's reads",
		Long: `func measures nearstore's function runtimes in two parts.

Compute: a standard compute function (--fn) runs on --size bytes of random
input in native Go (the functions package's reference implementation), in
wasm (wazero, compiled) and in eBPF (nearstore's interpreter), one instance
each, calls back to back for --duration (or --iterations calls), --repeat
times per runtime, alternating runtimes. Every runtime's output is checked
against native Go's; a difference is an error, not a number. The table
shows median MB/s of input, µs per call and the ratio to native Go. The
eBPF instruction and backward-jump budgets, which cap one call's work, are
lifted here; the clock still bounds every call.

Pushdown chain: a target runs in this process on a memory volume, serving
NVMe/TCP on loopback, with the wasm and eBPF runtimes; the host library
connects to it, writes a B+-tree (BPF-KV's format) whose point lookups make
--chain dependent reads (--chain - 1 levels of nodes, then the value),
loads btree_lookup over the wire and looks up random keys one at a time:
first by walking the tree from the host, one ordinary read per level, then
with one pushdown per lookup in each runtime. The target's command
counters, read before and after each run, show what each lookup cost on
the wire: --chain commands for the host's walk, exactly one for a
pushdown. Then btree_lookup's cost per step in this process, without I/O,
shows what each runtime adds to a step.`,
		Example: `  nearstore bench func --fn stats64 --size 1MiB --runtime all --json
  nearstore bench func --fn grep --size 256KiB --runtime wasm,ebpf --no-chain
  nearstore bench func --duration 2s --repeat 5 --plot func.png`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := volume.ParseSize(size)
			if err != nil {
				return err
			}
			if n <= 0 || n > funcbench.MaxFuncSize {
				return fmt.Errorf("--size %s: want 1 byte to %s", size, volume.FormatSize(funcbench.MaxFuncSize))
			}
			rts, err := parseFuncRuntimes(runtimes)
			if err != nil {
				return err
			}
			if dur <= 0 && iterations <= 0 {
				return fmt.Errorf("--duration %v: want a positive length, or --iterations", dur)
			}
			cfg := funcbench.Config{
				Function: fn, Size: int(n), Runtimes: rts, Duration: dur, Iterations: iterations,
				Repeat: repeat, SkipChain: noChain, ChainReads: chain,
			}
			cfg.Progress = rf.stages(cmd)
			rep, err := funcbench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return printReport(&rf, cmd.OutOrStdout(), rep, funcbench.WriteTable, funcbench.SavePlot)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fn, "fn", "stats64", "compute function: stats64, stats32, knn, grep or bitmap")
	f.StringVar(&size, "size", "1MiB", "input size (1MiB, 64KiB, ...)")
	f.StringVar(&runtimes, "runtime", "all", "runtimes: all, or a comma-separated list of native, wasm, ebpf")
	f.DurationVar(&dur, "duration", time.Second, "length of each run")
	f.IntVar(&iterations, "iterations", 0, "calls (compute) or lookups (chain) per run instead of --duration")
	f.IntVar(&repeat, "repeat", 3, "runs per runtime (medians are reported)")
	f.IntVar(&chain, "chain", funcbench.DefaultChainReads, fmt.Sprintf("dependent reads per lookup in the pushdown chain (%d to %d)", funcbench.MinChainReads, funcbench.MaxChainReads))
	f.BoolVar(&noChain, "no-chain", false, "skip the pushdown chain part")
	rf.add(f, "bar charts of the medians", "print every run and the medians as JSON")
	return cmd
}

// parseFuncRuntimes turns --runtime into runtime names: "all" or a
// comma-separated list.
func parseFuncRuntimes(s string) ([]string, error) {
	if strings.TrimSpace(s) == "all" {
		return funcbench.FuncRuntimes, nil
	}
	var rts []string
	for _, r := range strings.Split(s, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if r != funcbench.RuntimeNative && r != funcbench.RuntimeWasm && r != funcbench.RuntimeEBPF {
			return nil, fmt.Errorf("--runtime %q: want all, or a comma-separated list of %s", r, strings.Join(funcbench.FuncRuntimes, ", "))
		}
		rts = append(rts, r)
	}
	if len(rts) == 0 {
		return nil, fmt.Errorf("--runtime %q names no runtime", s)
	}
	return rts, nil
}

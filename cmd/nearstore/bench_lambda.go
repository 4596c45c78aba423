package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/nearstore/nearstore/bench/lambdabench"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nearstore/nearstore/lambda"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/volume"
)

// lambdaRunFlags are the flags `bench lambda` and `bench tpch` share: the
// modes, the cache's state, the runs, the runtime and the setup.
type lambdaRunFlags struct {
	requestSize, warmOrder, modes, runtime string
	link                                   string
	warm                                   float64
	repeat, depth, interleave              int
	profileEvery, profileFirst, readAhead  int
	seed                                   uint64
	proc                                   procFlags
	rf                                     reportFlags
}

func (l *lambdaRunFlags) add(f *pflag.FlagSet) {
	f.StringVar(&l.requestSize, "request-size", "1MiB", "bytes per λ request (whole records: 4 KiB multiples; TPC-H: 64-byte rows)")
	f.Float64Var(&l.warm, "warm", 0, "fraction of the file in the host cache at the start of each run (0: cold)")
	f.StringVar(&l.warmOrder, "warm-order", "seq", "which pages --warm brings in: seq (the first part of the file) or random")
	f.StringVar(&l.modes, "modes", "B,K,T,lambda", "modes to run, comma separated: B (buffered, native), K (host), T (target), lambda (the dispatcher)")
	f.IntVar(&l.repeat, "repeat", 3, "runs per mode (medians are reported); the modes take turns, ABCD DCBA …")
	f.IntVar(&l.depth, "depth", 1, "λ requests in flight")
	f.IntVar(&l.interleave, "interleave", 0, "run the modes together, each over its own copy of the file, taking turns every this many requests (ABCD DCBA …); 0: whole runs take turns")
	f.IntVar(&l.profileEvery, "profile-every", lambda.DefaultProfileEvery, "mode lambda: profile the first --profile-first of every this many requests per (file, function)")
	f.IntVar(&l.profileFirst, "profile-first", lambda.DefaultProfileFirst, "mode lambda: requests profiled (run on both sides and measured) at the start of every --profile-every")
	f.IntVar(&l.readAhead, "read-ahead", lambda.DefaultReadAhead, "mode lambda: ranges a sequential stream of reads at the target keeps in flight past the one called for (0: none)")
	f.StringVar(&l.runtime, "runtime", "wasm", "the function's runtime in modes K, T and lambda: wasm or ebpf")
	f.Uint64Var(&l.seed, "seed", 1, "the dataset's seed")
	f.StringVar(&l.link, "link", "", "emulated link to the target (e.g. 10gbit: a netns behind a tc-shaped veth pair; falls back to loopback where that cannot be done, and says so)")
	l.proc.add(f, "run the target in this process")
	l.rf.add(f, "a bar chart of the modes' throughput, normalized to B,", "print every run and the medians as JSON")
}

// settings parses the shared flags.
type lambdaSettings struct {
	requestSize int
	warmRandom  bool
	modes       []lambda.Mode
	runtime     sandbox.Kind
	targetExe   string
	pinning     string
}

func (l *lambdaRunFlags) parse() (lambdaSettings, error) {
	var s lambdaSettings
	n, err := volume.ParseSize(l.requestSize)
	if err != nil {
		return s, fmt.Errorf("--request-size: %w", err)
	}
	s.requestSize = int(n)
	switch l.warmOrder {
	case "seq", "sequential":
	case "random", "rand":
		s.warmRandom = true
	default:
		return s, fmt.Errorf("--warm-order %q: want seq or random", l.warmOrder)
	}
	if l.profileEvery < 1 || l.profileFirst < 1 {
		return s, fmt.Errorf("--profile-first %d, --profile-every %d: want 1 or more", l.profileFirst, l.profileEvery)
	}
	if l.readAhead < 0 {
		return s, fmt.Errorf("--read-ahead %d: want 0 or more", l.readAhead)
	}
	if s.modes, err = lambda.ParseModes(l.modes); err != nil {
		return s, fmt.Errorf("--modes: %w", err)
	}
	if s.runtime, err = parseKind("--runtime", l.runtime); err != nil {
		return s, err
	}
	if s.targetExe, s.pinning, err = l.proc.setup(); err != nil {
		return s, err
	}
	return s, nil
}

// run runs bench under the CPU profile --cpuprofile asks for, then
// prints its report, with s's pinning, as a table or JSON, and writes its
// plot if asked.
func (l *lambdaRunFlags) run(cmd *cobra.Command, s lambdaSettings, bench func(context.Context) (*lambdabench.Report, error)) error {
	stopProfile, err := startCPUProfile(l.proc.cpuprof)
	if err != nil {
		return err
	}
	defer stopProfile()
	rep, err := bench(cmd.Context())
	if err != nil {
		return err
	}
	rep.Machine.Pinning = s.pinning
	return printReport(&l.rf, cmd.OutOrStdout(), rep, lambdabench.WriteTable, lambdabench.SavePlot)
}

// newBenchLambdaCmd runs a λ-IO application in modes B, K, T and λ.
func newBenchLambdaCmd(g *globals) *cobra.Command {
	var (
		lf        lambdaRunFlags
		app, size string
	)
	cmd := &cobra.Command{
		Use:   "lambda",
		Short: "λ-IO's applications (stats64, stats32, knn, grep, bitmap) in modes B, K, T and λ",
		Long: `lambda runs one of λ-IO's applications over an offloadfs file in each mode:
B reads through the host cache and computes in native Go; K reads through
the cache and runs the sandboxed function on the host; T runs the function
at the target (λ read/write); lambda lets the dispatcher pick per request
from its fitted model. "nearstore target serve" runs as its own process
(or in this one with --in-process) with a memory volume; the host makes an
offloadfs, writes the dataset of --size bytes and cuts it into requests of
--request-size (records never straddle a request). Before every run the
host cache is dropped and warmed to --warm (the first part of the file, or
random pages with --warm-order random), untimed. The modes take turns
(ABCD DCBA …), --repeat times; every run's combined answer must equal the
native reference over the whole file, or the command fails. With
--interleave N the modes run together instead, each over its own copy of
the file, taking turns every N requests, so that a busy spell of a shared
machine slows them alike.

stats64, stats32, knn and grep are λ reads; bitmap is a λ write (the host
sends a run-length-encoded bitmap, the function expands it into the file;
the file is checked against the native expansion after every run, and a
run includes flushing what the host cache holds dirty).

The report gives the medians, the speedup over B, where each mode's calls
ran, and the goals: λ within 5% of the better of K and T, and, on a
10gbit link with a cold cache, λ at least 2.3x B for stats64 and grep.`,
		Example: `  nearstore bench lambda --app stats64 --size 256MiB --warm 0 --plot docs/img/lambda-stats64-cold.png
  nearstore bench lambda --app grep --warm 0.5 --warm-order random --json
  nearstore bench lambda --app stats64 --link 10gbit --modes B,lambda --repeat 5
  nearstore bench lambda --app knn --size 1GiB --warm 1 --repeat 9 --interleave 32`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := lf.parse()
			if err != nil {
				return err
			}
			n, err := volume.ParseSize(size)
			if err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			cfg := lambdabench.Config{
				App: app, Size: n, RequestSize: s.requestSize, Warm: lf.warm, WarmRandom: s.warmRandom,
				Modes: s.modes, Repeat: lf.repeat, Depth: lf.depth, Interleave: lf.interleave, Runtime: s.runtime, Seed: lf.seed,
				ProfileEvery: lf.profileEvery, ProfileFirst: lf.profileFirst, ReadAhead: lf.aheadOption(),
				Link: lf.link, TargetExe: s.targetExe, ServerCPUs: lf.proc.serverCPUs, Logger: benchLogger(cmd, g),
			}
			cfg.Progress = lf.rf.stages(cmd)
			return lf.run(cmd, s, func(ctx context.Context) (*lambdabench.Report, error) { return lambdabench.Run(ctx, cfg) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&app, "app", "stats64", "the application: "+strings.Join(lambdabench.Apps(), ", "))
	f.StringVar(&size, "size", "64MiB", "the dataset's size (bitmap: the bitmap's), a multiple of 4 KiB")
	lf.add(f)
	return cmd
}

// aheadOption is --read-ahead as lambda.Options.ReadAhead, where 0 means
// the default and a negative number none.
func (l *lambdaRunFlags) aheadOption() int {
	if l.readAhead == 0 {
		return -1
	}
	return l.readAhead
}

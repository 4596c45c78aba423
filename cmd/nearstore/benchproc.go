package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"

	"github.com/nearstore/nearstore/bench/proc"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// benchLogger is the logger of a benchmark or the demo: warnings only,
// unless --log-level was given, because the host library logs every
// connect and close and would clutter the progress display.
func benchLogger(cmd *cobra.Command, g *globals) *slog.Logger {
	if cmd.Flag("log-level").Changed {
		return g.logger()
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// procFlags are the flags of a benchmark whose target runs as its own
// process: where it runs, which CPUs each side may use, and a CPU profile
// of this process.
type procFlags struct {
	inProcess              bool
	clientCPUs, serverCPUs string
	cpuprof                string
}

// add registers the flags; inProcessHelp says what --in-process costs.
func (p *procFlags) add(f *pflag.FlagSet, inProcessHelp string) {
	f.BoolVar(&p.inProcess, "in-process", false, inProcessHelp)
	f.StringVar(&p.clientCPUs, "client-cpus", "", "pin this process (the host) to these CPUs (taskset list)")
	f.StringVar(&p.serverCPUs, "server-cpus", "", "pin the target process to these CPUs (taskset list)")
	f.StringVar(&p.cpuprof, "cpuprofile", "", "write a CPU profile of this process to this file")
}

// setup finds the target binary ("" in process) and pins this process,
// returning them with the pinning as the report describes it.
func (p *procFlags) setup() (exe, pinning string, err error) {
	if exe, err = targetExe(p.inProcess, p.serverCPUs); err != nil {
		return "", "", err
	}
	var parts []string
	h, err := pinHost(p.clientCPUs)
	if err != nil {
		return "", "", err
	}
	if h != "" {
		parts = append(parts, h)
	}
	if p.serverCPUs != "" {
		parts = append(parts, "target on CPUs "+p.serverCPUs)
	}
	return exe, strings.Join(parts, "; "), nil
}

// benchProcess is what procFlags.start set up for one run: the target
// binary ("" in process), the pinning as the report describes it, the
// benchmark's logger, and the CPU profile, which the caller stops when the
// run ends.
type benchProcess struct {
	exe, pinning string
	logger       *slog.Logger
	stopProfile  func()
}

// start is setup, then the logger (benchLogger) and the CPU profile
// (--cpuprofile) every benchmark run with these flags needs.
func (p *procFlags) start(cmd *cobra.Command, g *globals) (*benchProcess, error) {
	exe, pinning, err := p.setup()
	if err != nil {
		return nil, err
	}
	bp := &benchProcess{exe: exe, pinning: pinning, logger: benchLogger(cmd, g)}
	if bp.stopProfile, err = startCPUProfile(p.cpuprof); err != nil {
		return nil, err
	}
	return bp, nil
}

// startOwn is start for a benchmark whose target can only run as its own
// process: --in-process is refused.
func (p *procFlags) startOwn(cmd *cobra.Command, g *globals) (*benchProcess, error) {
	if p.inProcess {
		return nil, usageErrorf("%s runs the target as its own process; --in-process is not supported", strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "))
	}
	return p.start(cmd, g)
}

// targetExe is the binary a benchmark runs as its separate target process
// (this one), or "" with --in-process, where pinning the target cannot be
// asked for.
func targetExe(inProcess bool, serverCPUs string) (string, error) {
	if inProcess {
		if serverCPUs != "" {
			return "", errors.New("--server-cpus needs the target in its own process (drop --in-process)")
		}
		return "", nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the nearstore binary to run the target: %w", err)
	}
	return exe, nil
}

// pinHost pins this process to the CPUs in list (nothing if empty) and
// sizes GOMAXPROCS to them, returning the description the report shows.
func pinHost(list string) (string, error) {
	if list == "" {
		return "", nil
	}
	n, err := proc.Pin(list)
	if err != nil {
		return "", err
	}
	runtime.GOMAXPROCS(n)
	return "host (this process) on CPUs " + list, nil
}

// startCPUProfile profiles this process into path until the returned
// function is called; an empty path does nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/bench"
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
	n, err := bench.PinProcess(list)
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

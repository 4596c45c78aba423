// Command nearstore is disaggregated storage with near-data compute: it
// serves volumes over NVMe/TCP and drives them from the host side. Each
// subcommand is a thin layer that parses flags and calls a package.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "nearstore:", err)
		os.Exit(1)
	}
}

// globals are the flags every command shares.
type globals struct {
	logLevel string
	// takeOver is fs's --take-over: a read-write mount preempts another
	// host's ownership (offloadfs.Options.TakeOver).
	takeOver bool
}

func (g *globals) logger() *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "nearstore",
		Short:         "Disaggregated storage with near-data compute over NVMe/TCP",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(newTargetCmd(g), newDiscoverCmd(g), newIOCmd(g), newBenchCmd(g), newFuncCmd(g), newKVCmd(g), newFSCmd(g), newDemoCmd(g), newLSMCmd(g))
	return root
}

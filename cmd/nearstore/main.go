// Command nearstore is disaggregated storage with near-data compute: it
// serves volumes over NVMe/TCP and drives them from the host side. Each
// subcommand is a thin layer that parses flags and calls a package.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	sig := newInterrupts()
	g := &globals{sig: sig}
	err := newRoot(g).ExecuteContext(sig.ctx)
	code := 0
	var (
		ue *usageError
		ee *exitError
	)
	switch {
	case errors.As(err, &ue):
		code = 2
	case errors.As(err, &ee):
		code = ee.code
	case err != nil:
		code = 1
	}
	if s, mode := sig.received(); s != nil && mode == signalsInterrupt {
		// Interrupted: the shell's convention, whatever the command
		// made of it. A command that writes checks its context before
		// its commit point, so an interrupted one has changed nothing.
		code = 128 + int(s.(syscall.Signal))
		if err == nil || errors.Is(err, context.Canceled) {
			err = fmt.Errorf("interrupted by %v", s)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nearstore:", err)
	}
	os.Exit(code)
}

// signalMode is what SIGINT and SIGTERM mean to the running command.
type signalMode int

const (
	// signalsInterrupt, the default: the first signal cancels the
	// command's context and the process exits with 128 plus the
	// signal's number (130, 143) once the command has stopped; a second
	// signal exits at once.
	signalsInterrupt signalMode = iota
	// signalsStop: a signal is the command's normal way to stop (target
	// serve). The first cancels the context and the exit code is the
	// command's own; a second exits at once.
	signalsStop
	// signalsOwn: the command handles signals itself (fs mount unmounts
	// on the first and detaches on the second); they do nothing here.
	signalsOwn
)

// interrupts turns SIGINT and SIGTERM into the commands' context, as
// its mode says.
type interrupts struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	first os.Signal
	mode  signalMode
}

func newInterrupts() *interrupts {
	ctx, cancel := context.WithCancel(context.Background())
	s := &interrupts{ctx: ctx, cancel: cancel}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		for sig := range ch {
			s.mu.Lock()
			first, mode := s.first == nil, s.mode
			if first {
				s.first = sig
			}
			s.mu.Unlock()
			switch {
			case mode == signalsOwn:
			case first:
				s.cancel()
			default:
				fmt.Fprintf(os.Stderr, "nearstore: %v again: exiting at once\n", sig)
				os.Exit(128 + int(sig.(syscall.Signal)))
			}
		}
	}()
	return s
}

// set changes what signals mean from now on; nil-safe, for commands
// built without a process (tests).
func (s *interrupts) set(m signalMode) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = m
}

// received returns the first signal, if any, and the mode in force.
func (s *interrupts) received() (os.Signal, signalMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.mode
}

// globals are the flags every command shares.
type globals struct {
	logLevel string
	// takeOver is fs's --take-over: a read-write mount preempts another
	// host's ownership (offloadfs.Options.TakeOver).
	takeOver bool
	// sig is the process's signal handling; nil in tests that build the
	// command tree without a process.
	sig *interrupts
}

func (g *globals) logger() *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "nearstore",
		Short:         "Disaggregated storage with near-data compute over NVMe/TCP",
		Version:       buildVersion().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
				return usageErrorf("--log-level %q: want debug, info, warn or error", g.logLevel)
			}
			return nil
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(newAuthCmd(g))
	root.AddCommand(newTargetCmd(g), newDiscoverCmd(g), newIOCmd(g), newBenchCmd(g), newFuncCmd(g), newKVCmd(g), newFSCmd(g), newDemoCmd(g),
		newLSMCmd(g), newOffloadCmd(g), newPrepCmd(g), newVersionCmd())
	root.AddCommand(newClusterCmd(g), newNodeCmd(g))
	usageConventions(root)
	return root
}

// usageError is a command line the command cannot run: an unknown
// command or flag, a bad flag value, the wrong arguments. The process
// exits 2 for it, 1 for a command that ran and failed.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// exitError is a failure with its own exit code, for commands whose
// codes scripts already know (fsck's are e2fsck's).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// usageConventions makes every command in the tree answer a bad command
// line the same way: unknown subcommands, bad flags and wrong arguments
// are usage errors (exit 2), never help with exit 0.
func usageConventions(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	if cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
		cmd.Args = cobra.ArbitraryArgs
		cmd.RunE = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q for %q (see %s --help)", args[0], c.CommandPath(), c.CommandPath())
			}
			return c.Help()
		}
	}
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return &usageError{fmt.Errorf("%s: %w", c.CommandPath(), err)}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		usageConventions(sub)
	}
}

package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/offloadfs"
)

// TargetSpec describes a target child process serving one volume on a
// free port of 127.0.0.1, for a benchmark that drives it over NVMe/TCP.
type TargetSpec struct {
	// Exe is the nearstore executable.
	Exe string
	// NQN is the subsystem the target serves and the host connects to.
	NQN string
	// Volume is the target's --volume spec.
	Volume string
	// Args are further `target serve` arguments (e.g. --offload ADDR).
	Args []string
	// CPUs, when set, pins the target as proc.Spec.CPUs does.
	CPUs string
	// Logger is the host's logger.
	Logger *slog.Logger
}

// FSTarget is a target child process with a host connected to it (two
// I/O queues of depth 256, a benchmark's reconnect bounds) and a fresh
// offloadfs file system made on its namespace 1.
type FSTarget struct {
	Proc *proc.Process
	Addr string
	Ctrl *host.Controller
	NS   *host.Namespace
}

// StartFSTarget starts the target spec describes, waits for it to listen,
// connects and makes a file system on namespace 1. On error, what was
// started is stopped.
func StartFSTarget(ctx context.Context, spec TargetSpec) (_ *FSTarget, err error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	t := &FSTarget{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	args := append([]string{"target", "serve", "--log-level", "warn", "--allow-any-host",
		"--listen", t.Addr, "--nqn", spec.NQN, "--volume", spec.Volume}, spec.Args...)
	if t.Proc, err = proc.Start(ctx, proc.Spec{Name: "nearstore target", Path: spec.Exe, Args: args, CPUs: spec.CPUs}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if err := proc.WaitListening(ctx, t.Addr, t.Proc, 10*time.Second); err != nil {
		return nil, err
	}
	t.Ctrl, err = host.Connect(ctx, t.Addr, spec.NQN, HostOptions(host.Options{IOQueues: 2, QueueDepth: 256, Logger: spec.Logger}))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if t.NS, err = t.Ctrl.Namespace(1); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := offloadfs.Mkfs(ctx, t.NS, offloadfs.MkfsOptions{}); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return t, nil
}

// Close disconnects the host, then stops the target.
func (t *FSTarget) Close() error {
	var errs []error
	if t.Ctrl != nil {
		errs = append(errs, t.Ctrl.Close())
	}
	return errors.Join(append(errs, t.Proc.Stop())...)
}

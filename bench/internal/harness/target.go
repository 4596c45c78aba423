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
// free port, admitting any host (it serves the benchmark's own hosts
// only), for a benchmark that drives it over NVMe/TCP.
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
	// IP is the address it listens on (default 127.0.0.1) and Netns, when
	// set, the network namespace it runs in (proc.Spec.Netns), for a
	// target behind an emulated link.
	IP, Netns string
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

// StartTarget starts the target spec describes and waits (up to 10 s)
// for it to listen on the address it returns. On error, a process it
// started is stopped.
func StartTarget(ctx context.Context, spec TargetSpec) (_ *proc.Process, addr string, err error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, "", err
	}
	ip := spec.IP
	if ip == "" {
		ip = "127.0.0.1"
	}
	addr = net.JoinHostPort(ip, strconv.Itoa(port))
	args := append([]string{"target", "serve", "--log-level", "warn", "--allow-any-host",
		"--listen", addr, "--nqn", spec.NQN, "--volume", spec.Volume}, spec.Args...)
	p, err := proc.Start(ctx, proc.Spec{Name: "nearstore target", Path: spec.Exe, Args: args, CPUs: spec.CPUs, Netns: spec.Netns})
	if err != nil {
		return nil, "", err
	}
	if err := proc.WaitListening(ctx, addr, p, 10*time.Second); err != nil {
		p.Stop() // err already says why it is not listening
		return nil, "", err
	}
	return p, addr, nil
}

// StartFSTarget starts the target spec describes (StartTarget), connects
// and makes a file system on namespace 1. On error, what was started is
// stopped.
func StartFSTarget(ctx context.Context, spec TargetSpec) (_ *FSTarget, err error) {
	t := &FSTarget{}
	if t.Proc, t.Addr, err = StartTarget(ctx, spec); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
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

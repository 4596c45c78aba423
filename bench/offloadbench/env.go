package offloadbench

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/link"
	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offload/prep"
	"github.com/nearstore/nearstore/offloadfs"
)

// offloadEnv is what the offload benchmarks run on: `nearstore target
// serve --offload` as its own process (an engine on the storage node,
// reading the volume directly), optionally `nearstore offload serve` as
// another (a peer engine over NVMe/TCP), and this process as the file
// system's owner, mounted with the namespace as its Remote.
type offloadEnv struct {
	target     *proc.Process
	peer       *proc.Process // nil without a peer
	engineAddr string
	peerAddr   string
	ctrl       *host.Controller
	ns         *host.Namespace
	fsys       *offloadfs.FS
	local      *offload.Engine // runs what engines turn away
	closers    harness.Closers
}

const offloadNQN = "nqn.2026-11.io.nearstore:offload-bench"

// Process is what both experiments take from the process that runs
// them: TargetExe, the nearstore binary, runs as the target (and the
// peer) on ServerCPUs ("" for any); Pinning is how the report describes
// where each side runs; Logger is the host side's; Progress, if not nil,
// is told each stage as it starts.
type Process struct {
	TargetExe, ServerCPUs, Pinning string
	Logger                         *slog.Logger
	Progress                       func(string)
}

// startOffloadEnv starts the processes as p says: the target with a
// memory volume of size and its engine flags (engineArgs, without the
// --offload- prefix), behind lk (nil: loopback), and a peer engine if
// peer (on this side of the link, as another host would be).
func startOffloadEnv(ctx context.Context, p Process, size int64, engineArgs []string, peer bool, lk *link.Link) (_ *offloadEnv, err error) {
	exe, log := p.TargetExe, p.Logger
	if exe == "" {
		return nil, errors.New("bench: the offload benchmarks run the target as its own process (the nearstore binary)")
	}
	e := &offloadEnv{}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	ip, netns := link.LoopbackIP, ""
	if lk != nil {
		ip, netns = lk.TargetIP(), lk.Netns()
	}
	if e.engineAddr, err = freeAddr(ip); err != nil {
		return nil, err
	}
	args := []string{"--offload", e.engineAddr}
	for _, a := range engineArgs {
		args = append(args, strings.Replace(a, "--", "--offload-", 1))
	}
	var addr string
	if e.target, addr, err = harness.StartTarget(ctx, harness.TargetSpec{Exe: exe, NQN: offloadNQN,
		Volume: "mem:" + strconv.FormatInt(size, 10), Args: args, CPUs: p.ServerCPUs, IP: ip, Netns: netns}); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.target.Stop)
	if err := proc.WaitListening(ctx, e.engineAddr, e.target, 10*time.Second); err != nil {
		return nil, err
	}
	if peer {
		if e.peerAddr, err = freeAddr(link.LoopbackIP); err != nil {
			return nil, err
		}
		e.peer, err = proc.Start(ctx, proc.Spec{Name: "nearstore offload serve", Path: exe, Args: []string{
			"offload", "serve", "--log-level", "warn", "--listen", e.peerAddr, "--addr", addr, "--nqn", offloadNQN,
			"--host-nqn", "nqn.2026-11.io.nearstore:offload:bench-peer",
		}})
		if err != nil {
			return nil, err
		}
		e.closers = append(e.closers, e.peer.Stop)
		if err := proc.WaitListening(ctx, e.peerAddr, e.peer, 10*time.Second); err != nil {
			return nil, err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if e.ctrl, err = host.Connect(cctx, addr, offloadNQN, harness.HostOptions(host.Options{IOQueues: 2, Logger: log})); err != nil {
		return nil, err
	}
	if e.ns, err = e.ctrl.Namespace(1); err != nil {
		return nil, err
	}
	if err := offloadfs.Mkfs(ctx, e.ns, offloadfs.MkfsOptions{}); err != nil {
		return nil, err
	}
	if e.fsys, err = offloadfs.Mount(ctx, e.ns, offloadfs.Options{Logger: log, Remote: e.ns}); err != nil {
		return nil, err
	}
	tasks := offload.StandardTasks()
	if err := prep.Register(tasks); err != nil {
		return nil, err
	}
	if e.local, err = offload.NewEngine(offload.Config{HostNQN: "local", Device: e.ns, Tasks: tasks, Logger: log}); err != nil {
		return nil, err
	}
	return e, nil
}

// freeAddr returns ip with a port free on this side.
func freeAddr(ip string) (string, error) {
	port, err := proc.FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(ip, strconv.Itoa(port)), nil
}

// client dials an engine as a named client that runs rejected tasks here.
// imageSetVolume is the volume size n synthetic images fit in (each well
// under 256 KiB), with room to spare for the file system.
func imageSetVolume(n int) int64 { return int64(n)*256<<10 + 256<<20 }

// imageSetDir is where the experiments write their synthetic image set.
const imageSetDir = "/prep"

// writeImages writes n synthetic images into the file system and returns
// their names.
func (e *offloadEnv) writeImages(ctx context.Context, n int) ([]string, error) {
	if err := prep.Generate(ctx, e.fsys, imageSetDir, n, 1, nil); err != nil {
		return nil, err
	}
	return prep.List(e.fsys, imageSetDir)
}

func (e *offloadEnv) client(addr, name string, m *offload.Metrics) (*offload.Client, error) {
	c, err := offload.Dial(addr, offload.ClientOptions{Name: name, Local: e.local, Metrics: m})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, c.Close)
	return c, nil
}

// Close unmounts and stops the processes.
func (e *offloadEnv) Close() error {
	var errs []error
	if e.local != nil {
		e.local.Close()
	}
	if e.fsys != nil {
		errs = append(errs, e.fsys.Close())
	}
	if e.ctrl != nil {
		errs = append(errs, e.ctrl.Close())
	}
	errs = append(errs, e.closers.Close())
	return errors.Join(errs...)
}

// cpuTimes returns the CPU time so far of this process (the host), the
// target process and the peer process (0 without one, or where /proc
// cannot say).
func (e *offloadEnv) cpuTimes() (host, target, peer time.Duration) {
	host, _ = harness.ProcessCPU()
	of := func(p *proc.Process) time.Duration {
		if p == nil {
			return 0
		}
		d, _ := harness.ProcCPU(strconv.Itoa(p.Pid()))
		return d
	}
	return host, of(e.target), of(e.peer)
}

package lambdabench

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/link"
	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/lambda"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

// The setup `bench lambda` and `bench tpch` share: a target with both
// function runtimes serving one memory namespace (in this process or as
// `nearstore target serve`, on loopback or behind an emulated link), the
// host connected to it, an offloadfs on the namespace with the target as
// its Remote, and a λ dispatcher on top with its own host cache.

// lambdaNQN is the subsystem the benchmarks' target serves.
const lambdaNQN = "nqn.2026-11.io.nearstore:bench-lambda"

// lambdaEnvConfig configures startLambdaEnv.
type lambdaEnvConfig struct {
	// targetExe runs the target as `targetExe target serve`; empty runs
	// it in this process. serverCPUs pins that process.
	targetExe, serverCPUs string
	// link is the --link rate ("" for loopback).
	link string
	// volumeSize is the namespace's size; cacheSize the host cache's.
	volumeSize, cacheSize int64
	// requestSize is the largest λ request, which the functions' memory
	// and output limits must hold.
	requestSize int
	// depth is the requests in flight, for the host's instance pool.
	depth int
	// profileEvery and profileFirst are the dispatcher's n and k
	// (lambda.Options; 0: its defaults).
	profileEvery, profileFirst int
	// readAhead is the dispatcher's lambda.Options.ReadAhead.
	readAhead int
	logger    *slog.Logger
}

// lambdaEnv is a running setup.
type lambdaEnv struct {
	link   *link.Link
	where  string // "own process" or "this process"
	ctrl   *host.Controller
	fsys   *offloadfs.FS
	disp   *lambda.Dispatcher
	cache  *lambda.Cache
	target *proc.Process // the target's process (nil: it runs in this one)
	limits sandbox.Limits
	// maxOut is the most output one λ read can return: its result and
	// output travel in one NVMe transfer, which the controller limits.
	maxOut  int
	closers harness.Closers
}

// Close stops everything, in the reverse order of starting.
func (e *lambdaEnv) Close() error {
	return e.closers.Close()
}

// targetFailure adds to a failed run's error why the target's process
// ended, when it has: a bench that lost its target then says what the
// target said, not only that the connection closed.
func (e *lambdaEnv) targetFailure(err error) error {
	if err == nil || e.target == nil {
		return err
	}
	select {
	case <-e.target.Done():
	case <-time.After(time.Second):
		// Still running: what it logged may still say why.
		if said := e.target.StderrTail(); said != "" {
			return fmt.Errorf("%w; the target process, still running, logged:\n%s", err, said)
		}
		return err
	}
	if perr := e.target.Wait(); perr != nil {
		return fmt.Errorf("%w; the target process had ended: %w", err, perr)
	}
	return fmt.Errorf("%w; the target process had exited (status 0)", err)
}

// lambdaLimits are the function limits of both sides (they must agree,
// or a request could succeed on one and fail on the other): room for a
// request's input and output in a wasm instance, and a wall-clock limit
// generous enough for eBPF's interpreter on a whole request under the
// race detector.
func lambdaLimits(requestSize int) sandbox.Limits {
	mem := max(16<<20, (4*requestSize+(1<<20)+(1<<20)-1)&^((1<<20)-1))
	return sandbox.Limits{Time: 10 * time.Second, MemoryBytes: mem, MaxOutput: max(16<<20, 2*requestSize)}
}

// startLambdaEnv starts the target, connects, makes and mounts the file
// system and starts the dispatcher.
func startLambdaEnv(ctx context.Context, cfg lambdaEnvConfig) (_ *lambdaEnv, err error) {
	e := &lambdaEnv{limits: lambdaLimits(cfg.requestSize)}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if e.link, err = link.Open(ctx, cfg.link, cfg.logger); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, e.link.Close)
	var addr string
	if cfg.targetExe != "" {
		e.where = "own process"
		addr, err = e.startTargetProcess(ctx, cfg)
	} else {
		e.where = "this process"
		addr, err = e.startTargetHere(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	e.ctrl, err = host.Connect(ctx, addr, lambdaNQN, harness.HostOptions(host.Options{IOQueues: 2, QueueDepth: 64, Logger: cfg.logger}))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, e.ctrl.Close)
	e.maxOut = e.ctrl.MaxTransfer() - pushdown.ResultSize
	ns, err := e.ctrl.Namespace(1)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := offloadfs.Mkfs(ctx, ns, offloadfs.MkfsOptions{}); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	// The host's runtimes: the file system's fallbacks and mode K.
	wrt, err := wasm.NewRuntime(ctx, wasm.Options{PoolSize: max(16, 2*cfg.depth)})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, func() error { return wrt.Close(context.Background()) })
	rts := []sandbox.Runtime{wrt, ebpf.NewRuntime(ebpf.Options{Logger: cfg.logger})}
	e.fsys, err = offloadfs.Mount(ctx, ns, offloadfs.Options{
		Logger: cfg.logger, Remote: ns, Loader: e.ctrl, Runtimes: rts, FunctionLimits: e.limits,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, e.fsys.Close)
	e.cache = lambda.NewCache(cfg.cacheSize, 0)
	e.disp, err = lambda.New(ctx, e.fsys, lambda.Options{
		Runtimes: rts, Limits: e.limits, Cache: e.cache, Logger: cfg.logger,
		ProfileEvery: cfg.profileEvery, ProfileFirst: cfg.profileFirst, ReadAhead: cfg.readAhead,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, func() error { return e.disp.Close(context.Background()) })
	return e, nil
}

// register loads the named standard function of kind at the target and
// on the host, with its native twin for mode B.
func (e *lambdaEnv) register(ctx context.Context, name string, kind sandbox.Kind) (sandbox.ID, error) {
	mod, err := functions.Module(name, kind)
	if err != nil {
		return sandbox.ID{}, fmt.Errorf("bench: %w", err)
	}
	id, err := e.disp.Register(ctx, lambda.Function{Name: name, Module: mod, Native: functions.Native(name)})
	if err != nil {
		return sandbox.ID{}, fmt.Errorf("bench: registering %s (%v): %w", name, kind, err)
	}
	return id, nil
}

// startTargetHere serves a memory namespace from this process, on the
// link's target address.
func (e *lambdaEnv) startTargetHere(ctx context.Context, cfg lambdaEnvConfig) (string, error) {
	vol, err := volume.Open("mem:" + strconv.FormatInt(cfg.volumeSize, 10))
	if err != nil {
		return "", err
	}
	e.closers = append(e.closers, vol.Close)
	wrt, err := wasm.NewRuntime(ctx, wasm.Options{PoolSize: max(16, 2*cfg.depth)})
	if err != nil {
		return "", err
	}
	e.closers = append(e.closers, func() error { return wrt.Close(context.Background()) })
	srv, err := target.New(target.Config{
		// On the benchmark's link, which need not be loopback; for its own
		// hosts only.
		Subsystems:     []target.SubsystemConfig{{NQN: lambdaNQN, AllowAnyHost: true, Namespaces: []target.NamespaceConfig{{Backend: vol, Name: "mem"}}}},
		Logger:         cfg.logger,
		Runtimes:       []sandbox.Runtime{wrt, ebpf.NewRuntime(ebpf.Options{Logger: cfg.logger})},
		FunctionLimits: e.limits,
	})
	if err != nil {
		return "", err
	}
	ln, err := e.link.Listen(ctx, 0)
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, harness.ServeInProcess(srv, ln))
	return ln.Addr().String(), nil
}

// startTargetProcess runs `nearstore target serve` with a memory volume,
// in the link's namespace when it has one, with the same function
// limits as the host's.
func (e *lambdaEnv) startTargetProcess(ctx context.Context, cfg lambdaEnvConfig) (string, error) {
	p, addr, err := harness.StartTarget(ctx, harness.TargetSpec{
		Exe: cfg.targetExe, NQN: lambdaNQN, Volume: "mem:" + strconv.FormatInt(cfg.volumeSize, 10),
		Args: []string{"--func-time", e.limits.Time.String(), "--func-memory", strconv.Itoa(e.limits.MemoryBytes)},
		CPUs: cfg.serverCPUs, IP: e.link.TargetIP(), Netns: e.link.Netns(),
	})
	if err != nil {
		return "", err
	}
	e.target = p
	e.closers = append(e.closers, p.Stop)
	return addr, nil
}

package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/kv/lsm/offloadtask"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offload/prep"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

// engineFlags configure an offload engine, on a peer (offload serve) or
// in the target (target serve --offload).
type engineFlags struct {
	hostNQN     string
	policy      string
	cpu         float64
	tokens      int
	tokenTTL    time.Duration
	cache       string
	taskTimeout time.Duration
	cpuOf       string
}

// flags registers the engine's flags, each name prefixed (target serve
// has its own flags beside them).
func (e *engineFlags) flags(f *pflag.FlagSet, prefix, defaultNQN string) {
	f.StringVar(&e.hostNQN, prefix+"host-nqn", defaultNQN, "the host NQN the engine reaches the volume as: owners grant to it")
	f.StringVar(&e.policy, prefix+"policy", "none", "admission: none, cpu (turn tasks away while the machine's CPU use is above --"+prefix+"cpu-threshold), tokens (circulate --"+prefix+"tokens tokens)")
	f.Float64Var(&e.cpu, prefix+"cpu-threshold", 0.8, "cpu policy: the CPU use, 0 to 1, above which tasks are turned away")
	f.IntVar(&e.tokens, prefix+"tokens", 4, "tokens policy: how many tokens circulate")
	f.DurationVar(&e.tokenTTL, prefix+"token-ttl", 10*time.Second, "tokens policy: how long a client may keep a token")
	f.StringVar(&e.cache, prefix+"cache", "256MiB", "offload cache budget (0: no cache)")
	f.DurationVar(&e.taskTimeout, prefix+"task-timeout", 5*time.Minute, "a task running longer is stopped")
	f.StringVar(&e.cpuOf, prefix+"cpu-of", "machine", "cpu policy: whose CPU use counts: machine, or process (this process's share of the machine)")
}

// config builds the engine's configuration.
func (e *engineFlags) config(dev offload.Device, log *slog.Logger, reg prometheus.Registerer) (offload.Config, error) {
	pol, err := offload.ParsePolicy(e.policy)
	if err != nil {
		return offload.Config{}, usageErrorf("%v", err)
	}
	cache, err := volume.ParseSize(e.cache)
	if err != nil {
		return offload.Config{}, usageErrorf("cache %q: %v", e.cache, err)
	}
	tasks, err := engineTasks()
	if err != nil {
		return offload.Config{}, err
	}
	cfg := offload.Config{
		HostNQN: e.hostNQN, Device: dev, Tasks: tasks, CacheBytes: cache,
		Admission:   offload.Admission{Policy: pol, CPUThreshold: e.cpu, Tokens: e.tokens, TokenTTL: e.tokenTTL},
		TaskTimeout: e.taskTimeout, Logger: log,
	}
	switch e.cpuOf {
	case "machine":
	case "process":
		cfg.CPU = offload.ProcessCPU()
	default:
		return offload.Config{}, usageErrorf("cpu-of %q: want machine or process", e.cpuOf)
	}
	if reg != nil {
		cfg.Metrics = offload.NewMetrics(reg)
	}
	return cfg, nil
}

// engineTasks are the tasks every engine of this binary runs: the
// standard ones, OffloadPrep's and kv/lsm's (OffloadDB).
func engineTasks() (*offload.Registry, error) {
	r := offload.StandardTasks()
	if err := prep.Register(r); err != nil {
		return nil, err
	}
	if err := offloadtask.Register(r); err != nil {
		return nil, err
	}
	return r, nil
}

// localEngine is the engine a host runs tasks on itself with (offload
// run's fallback, prep run's host side): every task of engineTasks, on ns.
func localEngine(ns *host.Namespace, log *slog.Logger) (*offload.Engine, error) {
	tasks, err := engineTasks()
	if err != nil {
		return nil, err
	}
	return offload.NewEngine(offload.Config{HostNQN: "local", Device: ns, Tasks: tasks, Logger: log})
}

// serve runs an engine on listen until ctx ends; ready is called once it
// listens.
func serveEngine(ctx context.Context, cfg offload.Config, listen string, ready func(addr string)) error {
	e, err := offload.NewEngine(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("offload engine: %w", err)
	}
	srv := offload.NewServer(e)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	ready(ln.Addr().String())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Stop(sctx)
	<-served
	return nil
}

// registerer is reg as a Registerer, nil without one (a nil *Registry
// in the interface would not be nil).
func registerer(reg *prometheus.Registry) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return reg
}

// startInTarget starts an engine in the target's process on namespace 1
// of subsystem nqn, reading vol directly, its I/O admitted through the
// target's grants. It returns when ctx ends or the engine fails.
func (e *engineFlags) startInTarget(ctx context.Context, listen string, srv *target.Server, nqn string, vol volume.Volume, log *slog.Logger, reg prometheus.Registerer, out io.Writer) <-chan error {
	done := make(chan error, 1)
	cfg, err := e.config(offloadfs.VolumeDevice(vol), log, reg)
	if err != nil {
		done <- err
		return done
	}
	hostNQN := cfg.HostNQN
	cfg.Admit = func(lba, n uint64, write bool) (func(), error) {
		return srv.AdmitGranted(nqn, 1, hostNQN, lba, n, write)
	}
	go func() {
		done <- serveEngine(ctx, cfg, listen, func(addr string) {
			fmt.Fprintf(out, "offload engine on %s, reaching the volume as %s\n", addr, hostNQN)
		})
	}()
	return done
}

func newOffloadCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "offload",
		Short: "Run offload engines, and offload tasks to them",
		Long: `An offload engine runs whole tasks (registered Go code: copy, crc32c, prep) on
blocks a file system's owner grants it. It runs on the storage node, in
the target's process (target serve --offload ADDR), or on a peer that
reaches the volume over NVMe/TCP (offload serve). offload run is the
owner's side: it reserves the outputs, grants the blocks, sends the task,
and commits the outputs only if the task succeeds; a task the engine
turns away (admission) runs on this host instead.`,
	}
	cmd.AddCommand(newOffloadServeCmd(g), newOffloadRunCmd(g), newOffloadEnginesCmd(g))
	return cmd
}

func newOffloadServeCmd(g *globals) *cobra.Command {
	var (
		c              conn
		ef             engineFlags
		listen, metric string
	)
	hostname, _ := os.Hostname()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run an offload engine on this host, reaching the volume over NVMe/TCP",
		Example: `  nearstore offload serve --listen 127.0.0.1:7421 --addr 10.0.0.2:4420 --nqn nqn.2026-11.io.nearstore:vol1
  nearstore offload serve --listen :7421 --policy tokens --tokens 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := g.logger()
			g.sig.set(signalsStop)
			ctrl, ns, err := c.open(ctx, g, host.Options{HostNQN: ef.hostNQN, IOQueues: 2})
			if err != nil {
				return err
			}
			defer ctrl.Close()
			if err := offload.RegisterTaskHost(ctx, ns, ef.hostNQN); err != nil {
				return err
			}
			var reg prometheus.Registerer
			if metric != "" {
				r, stop, err := serveMetrics(metric, log)
				if err != nil {
					return err
				}
				defer stop()
				reg = r
			}
			cfg, err := ef.config(ns, log, reg)
			if err != nil {
				return err
			}
			cfg.BeforeTask = func(ctx context.Context) error { return offload.RegisterTaskHost(ctx, ns, ef.hostNQN) }
			return serveEngine(ctx, cfg, listen, func(addr string) {
				fmt.Fprintf(cmd.OutOrStdout(), "offload engine on %s, reaching %s at %s as %s; Ctrl-C stops\n", addr, c.nqn, c.addr, ef.hostNQN)
			})
		},
	}
	c.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:7421", "address the engine serves gRPC on")
	f.StringVar(&metric, "metrics", "", "serve Prometheus metrics on this address")
	ef.flags(f, "", "nqn.2026-11.io.nearstore:offload:"+hostname)
	return cmd
}

// runReport is offload run's --json.
type runReport struct {
	Task   string  `json:"task"`
	Engine string  `json:"engine"`
	Where  string  `json:"where"`
	Output string  `json:"output_hex"`
	Sizes  []int64 `json:"sizes"`
}

func newOffloadRunCmd(g *globals) *cobra.Command {
	var (
		c         conn
		engine    string
		ins, outs []string
		args      string
		module    string
		asJSON    bool
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run TASK",
		Short: "Offload a task over files of the file system to an engine",
		Long: `run mounts the file system read-write and runs TASK on the engine at
--engine over the --in files (read) and the --out files (PATH:SIZE: the
path the output gets, and the most bytes the task may write there). The
files go to the task in the order given, inputs first. An output takes its
name only when the task succeeds; a failed task leaves no trace. With
--module FILE the task is that wasm module, sent with the request (TASK
only names it; offload/wasm.go states what the module may import).`,
		Example: `  nearstore offload run copy --engine 127.0.0.1:7420 --in /a --in /b --out /ab:1MiB
  nearstore offload run crc32c --engine 127.0.0.1:7420 --in /a`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			task := a[0]
			var mod []byte
			if module != "" {
				var err error
				if mod, err = os.ReadFile(module); err != nil {
					return usageErrorf("--module: %v", err)
				}
			}
			var files []offloadfs.OffloadFile
			for _, o := range outs {
				p, size, ok := strings.Cut(o, ":")
				if !ok {
					return usageErrorf("--out %q: want PATH:SIZE", o)
				}
				n, err := volume.ParseSize(size)
				if err != nil {
					return usageErrorf("--out %q: %v", o, err)
				}
				files = append(files, offloadfs.OffloadFile{Out: p, Reserve: n})
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			sess, err := fsMount(ctx, g, &c, fsMountOpts{rw: true, remote: true})
			if err != nil {
				return err
			}
			defer sess.close()
			fsys := sess.fsys
			var inputs []offloadfs.OffloadFile
			for _, p := range ins {
				f, err := fsys.Open(p)
				if err != nil {
					return fsDescribe(err)
				}
				defer f.Close()
				inputs = append(inputs, offloadfs.OffloadFile{In: f})
			}
			files = append(inputs, files...)
			local, err := localEngine(sess.ns, g.logger())
			if err != nil {
				return err
			}
			defer local.Close()
			cl, err := offload.Dial(engine, offload.ClientOptions{Local: local})
			if err != nil {
				return err
			}
			defer cl.Close()
			var res *offloadfs.OffloadResult
			if mod != nil {
				res, err = fsys.OffloadModule(ctx, cl, task, mod, files, []byte(args))
			} else {
				res, err = fsys.Offload(ctx, cl, task, files, []byte(args))
			}
			if err != nil {
				return fsDescribe(err)
			}
			if err := sess.close(); err != nil {
				return err
			}
			rep := runReport{Task: task, Engine: engine, Where: "engine", Output: hex.EncodeToString(res.Output), Sizes: res.Sizes}
			if res.Local {
				rep.Where = "local"
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s ran on the %s (%s); output %s\n", task, rep.Where, engine, rep.Output)
			for i, f := range files {
				if f.Out != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %d bytes\n", fsPath(f.Out), res.Sizes[i])
				}
			}
			return nil
		},
	}
	c.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&engine, "engine", envOr("NEARSTORE_OFFLOAD", "127.0.0.1:7420"), "the engine's address (default $NEARSTORE_OFFLOAD)")
	f.StringArrayVar(&ins, "in", nil, "an input file (repeat)")
	f.StringArrayVar(&outs, "out", nil, "an output: PATH:SIZE (repeat)")
	f.StringVar(&args, "args", "", "the task's arguments")
	f.StringVar(&module, "module", "", "run this wasm module as the task")
	f.DurationVar(&timeout, "timeout", 0, "give up after this long (0: never)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newOffloadEnginesCmd(g *globals) *cobra.Command {
	var (
		engines []string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:     "engines",
		Short:   "Show offload engines and their load",
		Example: `  nearstore offload engines --engine 127.0.0.1:7420 --engine 10.0.0.3:7421`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			es := offload.NewEngines(offload.ClientOptions{})
			defer es.Close()
			for _, a := range engines {
				if _, err := es.Add(a); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			rows := es.List(ctx)
			cancel()
			var failed error
			for _, r := range rows {
				failed = errors.Join(failed, r.Err)
			}
			if asJSON {
				if err := writeJSON(cmd.OutOrStdout(), rows); err != nil {
					return err
				}
				return failed
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ENGINE\tHOST NQN\tPOLICY\tCPU\tRUNNING\tTOKENS FREE\tTASKS")
			for _, r := range rows {
				if r.Err != nil {
					fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%s\n", r.Addr, r.Error)
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f%%\t%d\t%d\t%s\n", r.Addr, r.HostNQN, r.Policy, 100*r.CPU, r.Running, r.TokensFree, strings.Join(r.Tasks, ","))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return failed
		},
	}
	cmd.Flags().StringArrayVar(&engines, "engine", []string{envOr("NEARSTORE_OFFLOAD", "127.0.0.1:7420")}, "an engine's address (repeat)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

func newTargetCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "target", Short: "Run the NVMe/TCP storage target"}
	var (
		listen, nqn, metrics string
		specs                []string
		queues, depth        int
		grace                time.Duration
		funcTime             time.Duration
		funcMem, funcSteps   int
		offloadAddr          string
		offloadEngine        engineFlags
	)
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve volumes as NVMe/TCP namespaces until SIGINT/SIGTERM",
		Example: `  nearstore target serve --listen 127.0.0.1:4420 --nqn nqn.2026-11.io.nearstore:vol1 --volume mem:1GiB
  nearstore target serve --nqn nqn.2026-11.io.nearstore:vol1 --volume file:/var/lib/nearstore/vol1?size=10GiB --metrics :9100
  nearstore target serve --nqn nqn.2026-11.io.nearstore:sim --volume sim:nand:4GiB --volume sim:optane:1GiB`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.logger()
			g.sig.set(signalsStop)
			if len(specs) == 0 {
				return errors.New("at least one --volume is needed")
			}
			var nss []target.NamespaceConfig
			var vols []volume.Volume
			for _, sp := range specs {
				v, err := volume.Open(sp)
				if err != nil {
					return err
				}
				defer v.Close()
				nss = append(nss, target.NamespaceConfig{Backend: v, Name: sp})
				vols = append(vols, v)
				log.Info("volume", "spec", sp, "size", volume.FormatSize(v.Size()), "block", v.BlockSize())
			}
			// The function runtimes hosts load modules into (nearstore func load).
			wrt, err := wasm.NewRuntime(cmd.Context(), wasm.Options{})
			if err != nil {
				return err
			}
			defer wrt.Close(context.Background())
			cfg := target.Config{
				Subsystems:  []target.SubsystemConfig{{NQN: nqn, Namespaces: nss}},
				MaxIOQueues: queues,
				QueueDepth:  depth,
				Logger:      log,
				Runtimes:    []sandbox.Runtime{wrt, ebpf.NewRuntime(ebpf.Options{Logger: log})},
				FunctionLimits: sandbox.Limits{
					Time:        funcTime,
					MemoryBytes: funcMem,
					MaxSteps:    funcSteps,
				},
			}
			var reg *prometheus.Registry
			if metrics != "" {
				var stop func()
				if reg, stop, err = serveMetrics(metrics, log); err != nil {
					return err
				}
				defer stop()
				cfg.Metrics = target.NewMetrics(reg)
			}
			srv, err := target.New(cfg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "serving %s on %s (%d namespace(s)); Ctrl-C stops\n", nqn, ln.Addr(), len(nss))
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			var offloaded <-chan error // the in-target offload engine (offload.go)
			if offloadAddr != "" {
				offloaded = offloadEngine.startInTarget(cmd.Context(), offloadAddr, srv, nqn, vols[0], log, registerer(reg), cmd.OutOrStdout())
			}
			select {
			case err := <-served:
				return err
			case err := <-offloaded:
				if err != nil {
					srv.Close()
					return fmt.Errorf("offload engine: %w", err)
				}
				<-cmd.Context().Done() // it stops only with the context
				offloaded = nil
			case <-cmd.Context().Done():
			}
			log.Info("shutting down: finishing in-flight commands", "grace", grace)
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			err = srv.Shutdown(ctx)
			<-served
			if offloaded != nil {
				<-offloaded // its tasks end before the volumes close
			}
			return err
		},
	}
	f := serve.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:4420", "address to listen on (host:port)")
	f.StringVar(&nqn, "nqn", defaultNQN, "subsystem NQN")
	f.StringArrayVar(&specs, "volume", nil, "volume spec, one namespace each: mem:SIZE, file:PATH?size=SIZE[&direct=1], dev:/dev/X, sim:nand:SIZE, sim:optane:SIZE")
	f.StringVar(&metrics, "metrics", "", "serve Prometheus metrics on this address (e.g. 127.0.0.1:9100)")
	f.IntVar(&queues, "max-io-queues", 16, "I/O queues a host may create")
	f.IntVar(&depth, "queue-depth", 1024, "maximum queue depth")
	f.DurationVar(&grace, "shutdown-grace", 10*time.Second, "how long shutdown waits for in-flight commands")
	f.DurationVar(&funcTime, "func-time", 100*time.Millisecond, "storage functions: wall time of one call before it is stopped")
	f.IntVar(&funcMem, "func-memory", 16<<20, "storage functions: bytes of memory a wasm instance may have")
	f.IntVar(&funcSteps, "func-max-steps", 64, "storage functions: steps (reads) one pushdown request may take")
	f.StringVar(&offloadAddr, "offload", "", "also run an offload engine on namespace 1, in this process, serving gRPC on this address (see nearstore offload)")
	offloadEngine.flags(f, "offload-", "nqn.2026-11.io.nearstore:offload:target")
	cmd.AddCommand(serve)
	return cmd
}

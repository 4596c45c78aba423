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
		cpuprof              string
		specs                []string
		kvSpecs              []string // KV namespaces (target_kv.go)
		queues, depth        int
		grace                time.Duration
		funcTime             time.Duration
		funcMem, funcSteps   int
		funcStack            int
		offloadAddr          string
		offloadEngine        engineFlags
		lim                  target.Config // the limits hosts are held to
		allowHosts           []string
		allowAny             bool
		dhchapSecrets        []string // HOSTNQN=SECRET
		dhchapCtrlSecrets    []string
		dhchapHashes         []string
		dhchapGroups         []string
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
			if len(specs) == 0 && len(kvSpecs) == 0 {
				return errors.New("at least one --volume or --kv-namespace is needed")
			}
			keys, err := targetSecrets(dhchapSecrets, dhchapCtrlSecrets, allowHosts, allowAny)
			if err != nil {
				return err
			}
			hashes, err := parseHashes(dhchapHashes)
			if err != nil {
				return err
			}
			groups, err := parseGroups(dhchapGroups)
			if err != nil {
				return err
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
			for _, sp := range kvSpecs {
				nc, closeKV, err := openKVNamespace(cmd.Context(), sp, log)
				if err != nil {
					return err
				}
				defer closeKV()
				nss = append(nss, nc)
			}
			// The function runtimes hosts load modules into (nearstore func load).
			wrt, err := wasm.NewRuntime(cmd.Context(), wasm.Options{})
			if err != nil {
				return err
			}
			defer wrt.Close(context.Background())
			cfg := target.Config{
				Subsystems: []target.SubsystemConfig{{
					NQN: nqn, Namespaces: nss,
					AllowedHosts: allowHosts, AllowAnyHost: allowAny,
					DHCHAP: keys, DHCHAPHashes: hashes, DHCHAPGroups: groups,
				}},
				MaxIOQueues:              queues,
				QueueDepth:               depth,
				MaxConnections:           lim.MaxConnections,
				MaxConnectionsPerAddr:    lim.MaxConnectionsPerAddr,
				MaxIdle:                  lim.MaxIdle,
				DataTimeout:              lim.DataTimeout,
				PollSpin:                 lim.PollSpin,
				MaxFunctionSize:          lim.MaxFunctionSize,
				MaxFunctionsPerHost:      lim.MaxFunctionsPerHost,
				MaxFunctionBytesPerHost:  lim.MaxFunctionBytesPerHost,
				MaxFunctionMemoryPerHost: lim.MaxFunctionMemoryPerHost,
				MaxFunctionCallsPerHost:  lim.MaxFunctionCallsPerHost,
				FunctionWorkers:          lim.FunctionWorkers,
				FunctionSlice:            lim.FunctionSlice,
				HostStateLease:           lim.HostStateLease,
				Logger:                   log,
				Runtimes:                 []sandbox.Runtime{wrt, ebpf.NewRuntime(ebpf.Options{Logger: log})},
				FunctionLimits: sandbox.Limits{
					Time:        funcTime,
					MemoryBytes: funcMem,
					StackBytes:  funcStack,
					MaxSteps:    funcSteps,
				},
			}
			stopProfile, err := startCPUProfile(cpuprof)
			if err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer stopProfile()
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
			if ta, ok := ln.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() && !allowAny && len(allowHosts) == 0 {
				ln.Close()
				return fmt.Errorf("--listen %s is not a loopback address: name the hosts that may connect with --allow-host NQN, or admit any host with --allow-any-host", ln.Addr())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "serving %s on %s (%d namespace(s)); Ctrl-C stops\n", nqn, ln.Addr(), len(nss))
			switch {
			case allowAny:
				fmt.Fprintln(cmd.OutOrStdout(), "admitting any host (--allow-any-host)")
			case len(allowHosts) == 0:
				fmt.Fprintln(cmd.OutOrStdout(), "admitting any host: no --allow-host given, so the target serves on loopback only")
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			var offloaded <-chan error // the in-target offload engine (offload.go)
			if offloadAddr != "" && len(vols) > 0 {
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
	f.StringArrayVar(&kvSpecs, "kv-namespace", nil, "volume spec of a Key Value namespace (NVMe KV command set, LEED's store), after the --volume ones; formatted if it holds no store")
	f.StringVar(&metrics, "metrics", "", "serve Prometheus metrics on this address (e.g. 127.0.0.1:9100)")
	f.StringVar(&cpuprof, "cpuprofile", "", "write a CPU profile of the target to this file, from start to shutdown (SIGINT/SIGTERM)")
	f.IntVar(&queues, "max-io-queues", 16, "I/O queues a host may create")
	f.IntVar(&depth, "queue-depth", 1024, "maximum queue depth")
	f.StringArrayVar(&allowHosts, "allow-host", nil, "host NQN that may connect (repeatable); without it or --allow-any-host, only a loopback --listen is allowed")
	f.BoolVar(&allowAny, "allow-any-host", false, "let any host connect, on any listen address")
	f.StringArrayVar(&dhchapSecrets, "dhchap-secret", nil, "HOSTNQN=DHHC-1:...: that host must authenticate with this DH-HMAC-CHAP secret (repeatable; HOSTNQN=@FILE reads it from a file; see nearstore auth gen-key)")
	f.StringArrayVar(&dhchapCtrlSecrets, "dhchap-ctrl-secret", nil, "HOSTNQN=DHHC-1:...: the controller secret for that host's bidirectional authentication (repeatable; HOSTNQN=@FILE)")
	f.StringSliceVar(&dhchapHashes, "dhchap-hash", nil, "DH-HMAC-CHAP hashes accepted, preferred first (default sha256,sha384,sha512)")
	f.StringSliceVar(&dhchapGroups, "dhchap-dhgroup", nil, "DH-HMAC-CHAP DH groups accepted, preferred first (default null,ffdhe2048,ffdhe3072,ffdhe4096,ffdhe6144,ffdhe8192)")
	f.IntVar(&lim.MaxConnections, "max-connections", 4096, "open connections (queues) of all hosts; more are closed at once")
	f.IntVar(&lim.MaxConnectionsPerAddr, "max-connections-per-addr", 512, "open connections from one source IP address")
	f.DurationVar(&lim.MaxIdle, "max-idle", 2*time.Minute, "keep-alive timeout of a host that asks for none (KATO 0)")
	f.DurationVar(&lim.DataTimeout, "data-timeout", 30*time.Second, "how long a queue may keep the target waiting for data it said it would send")
	f.DurationVar(&lim.PollSpin, "poll-spin", 0, "how long a queue's reader polls for the host's next command before it sleeps (0: the default, 50µs; negative: never)")
	f.IntVar(&lim.MaxFunctionSize, "func-max-size", 4<<20, "storage functions: bytes of the largest module a host may load")
	f.IntVar(&lim.MaxFunctionsPerHost, "func-max-per-host", 64, "storage functions: functions one host may keep loaded")
	f.IntVar(&lim.MaxFunctionBytesPerHost, "func-max-bytes-per-host", 64<<20, "storage functions: bytes of modules one host may keep loaded")
	f.Int64Var(&lim.MaxFunctionMemoryPerHost, "func-max-memory-per-host", 1<<30, "storage functions: memory one host's functions may pin, each counted at --func-memory")
	f.IntVar(&lim.MaxFunctionCallsPerHost, "func-max-calls-per-host", 64, "storage functions: requests of one host running at once; more wait")
	f.IntVar(&lim.FunctionWorkers, "func-workers", 0, "storage functions: function steps of all hosts running at once, shared by least CPU used per host (0: GOMAXPROCS-1, at least 1; keep it below GOMAXPROCS so plain I/O keeps a CPU)")
	f.DurationVar(&lim.FunctionSlice, "func-slice", time.Millisecond, "storage functions: how long a step keeps its CPU slot while others wait, where it can yield (between pushdown steps, in the eBPF interpreter)")
	f.DurationVar(&lim.HostStateLease, "host-state-lease", 10*time.Minute, "how long a host's extent maps and functions are kept after its last controller went")
	f.DurationVar(&grace, "shutdown-grace", 10*time.Second, "how long shutdown waits for in-flight commands")
	f.DurationVar(&funcTime, "func-time", 100*time.Millisecond, "storage functions: wall time of one call before it is stopped")
	f.IntVar(&funcMem, "func-memory", 16<<20, "storage functions: bytes of memory a wasm instance may have (with --func-stack, what each loaded function counts against --func-max-memory-per-host)")
	f.IntVar(&funcStack, "func-stack", 1<<20, "storage functions: bytes of call stack a wasm call may use, each frame counted at an upper bound of its size; deeper recursion fails with Function Memory")
	f.IntVar(&funcSteps, "func-max-steps", 64, "storage functions: steps (reads) one pushdown request may take")
	f.StringVar(&offloadAddr, "offload", "", "also run an offload engine on namespace 1, in this process, serving gRPC on this address (see nearstore offload)")
	offloadEngine.flags(f, "offload-", "nqn.2026-11.io.nearstore:offload:target")
	cmd.AddCommand(serve)
	return cmd
}

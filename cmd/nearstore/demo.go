package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/bench"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/iocheck"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

func newDemoCmd(g *globals) *cobra.Command {
	var size string
	var dur time.Duration
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start an embedded target on a memory volume, verify it and benchmark it",
		Long: `demo runs the whole data plane in one process: an NVMe/TCP target serving
a memory volume on a loopback port, nearstore's host library connected to it
over real TCP, a full verify, and short 4 KiB random read and write
benchmarks. It leaves nothing behind.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			vol, err := volume.Open("mem:" + size)
			if err != nil {
				return err
			}
			defer vol.Close()
			const nqn = "nqn.2026-11.io.nearstore:demo"
			// The function runtimes, as target serve has them, so that
			// functions can be loaded into the demo's target too.
			wrt, err := wasm.NewRuntime(ctx, wasm.Options{})
			if err != nil {
				return err
			}
			defer wrt.Close(context.Background())
			srv, err := target.New(target.Config{
				Subsystems: []target.SubsystemConfig{{NQN: nqn, Namespaces: []target.NamespaceConfig{{Backend: vol, Name: vol.String()}}}},
				Runtimes:   []sandbox.Runtime{wrt, ebpf.NewRuntime(ebpf.Options{Logger: g.logger()})},
			})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			defer func() {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
				<-served
			}()
			addr := ln.Addr().String()
			fmt.Fprintf(out, "target: %s serving %s (%s) over NVMe/TCP\n\n", addr, nqn, vol)

			ctrl, err := host.Connect(ctx, addr, nqn, host.Options{IOQueues: 2, QueueDepth: 32, Logger: g.logger()})
			if err != nil {
				return err
			}
			defer ctrl.Close()
			ns, err := ctrl.Namespace(1)
			if err != nil {
				return err
			}
			id := ctrl.Identify()
			fmt.Fprintf(out, "host: connected, controller %d, model %q, namespace 1: %s in %d-byte blocks\n\n",
				id.CNTLID, id.Model, volume.FormatSize(ns.Size()), ns.BlockSize())

			fmt.Fprintln(out, "verify:")
			rep := iocheck.Run(ctx, ns, iocheck.Options{Size: min(ns.Size(), 64<<20)})
			if err := printVerify(out, rep, false); err != nil {
				return err
			}
			fmt.Fprintln(out)
			var rs []bench.BlockIOResult
			for _, rw := range []string{"randread", "randwrite"} {
				p, prog := progressBar(dur, rw+" 4k qd32×2")
				r, err := bench.RunBlockIO(ctx, ns, bench.BlockIOConfig{
					Pattern: rw, BlockSize: 4096, QueueDepth: 32, Queues: 2, Duration: dur, Progress: prog,
				})
				p.Wait()
				if err != nil {
					return err
				}
				rs = append(rs, r)
			}
			if err := printBlockIO(out, rs, false); err != nil {
				return err
			}
			fmt.Fprintln(out, "\nBoth ends ran in this process over loopback TCP; `nearstore target serve` and `nearstore io bench` split them.")
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.Canceled) {
				return ctx.Err()
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&size, "size", "256MiB", "size of the memory volume")
	cmd.Flags().DurationVar(&dur, "duration", 3*time.Second, "length of each benchmark")
	return cmd
}

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nearstore/nearstore/bench/blockio"
	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/volume"
)

func newBenchCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Reproducible benchmarks that run nearstore and a baseline side by side"}
	cmd.AddCommand(newBenchBlockIOCmd(g))
	cmd.AddCommand(newBenchFuncCmd(g))
	cmd.AddCommand(newBenchBTreeCmd(g))
	cmd.AddCommand(newBenchFSCmd(g))
	cmd.AddCommand(newBenchLambdaCmd(g))
	cmd.AddCommand(newBenchTPCHCmd(g))
	cmd.AddCommand(newBenchLinkCmd(g))
	cmd.AddCommand(newBenchLSMCmd(g))
	cmd.AddCommand(newBenchLEEDCmd(g)) // bench_leed.go
	cmd.AddCommand(newBenchIsolationCmd(g))
	cmd.AddCommand(newBenchPrepCmd(g), newBenchOffloadCmd(g))
	cmd.AddCommand(newBenchChainCmd())
	cmd.AddCommand(newBenchRubbleCmd()) // bench_rubble.go
	return cmd
}

func newBenchBlockIOCmd(g *globals) *cobra.Command {
	var (
		repeat, nbdThreads                int
		dur, pollSpin                     time.Duration
		size, baseline, plotFile, cpuprof string
		clientCPUs, serverCPUs            string
		configs                           []string
		asJSON, asMarkdown, quiet, floor  bool
	)
	cmd := &cobra.Command{
		Use:   "blockio",
		Short: "nearstore vs nbdkit: 4 KiB random read/write IOPS and latency over loopback",
		Long: `blockio measures nearstore's block I/O against nbdkit, the userspace NBD
server, in one run. nearstore: "nearstore target serve" on a memory volume
runs as a separate process, driven by the host library in this process (one
TCP connection per queue). nbdkit: its memory plugin, driven by fio's nbd
engine (one fio job, hence one NBD connection, per queue). Both devices are
written once in full before the first run, so reads find real memory.

Each configuration runs --repeat times per system, alternating systems; the
table shows medians and the ratio of nearstore's IOPS to nbdkit's. A third system, pingpong,
is the floor: bare Go TCP on loopback moving a read's bytes (a 72-byte
request, a 24-byte header and the block back) with the same queue depth,
both ends in this process. The bars (issue 25): at QD1 4 KiB randread on
one queue nearstore's p50 at most 40 µs and its IOPS at least 1.5x
nbdkit's; at QD32, at least 2x nbdkit's. --json has every run (with CPU
time per operation of each side, where known), the medians and the bars.
Configurations are RW:QD:QUEUES[:BS]; the default is the matrix
{randread, randwrite} x {QD1, QD32} x {1, 2 queues} at 4 KiB.
scripts/bench-deps.sh (make bench-deps) installs nbdkit and fio.`,
		Example: `  nearstore bench blockio --repeat 3 --duration 5s --plot docs/img/blockio.png
  nearstore bench blockio --configs randread:32:1,randread:32:2 --repeat 5 --json
  nearstore bench blockio --baseline none --configs randread:32:2 --cpuprofile client.pprof`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			n, err := volume.ParseSize(size)
			if err != nil {
				return err
			}
			var points []blockio.Point
			for _, s := range configs {
				p, err := blockio.ParsePoint(s)
				if err != nil {
					return err
				}
				points = append(points, p)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding the nearstore binary to run the target: %w", err)
			}
			log := benchLogger(cmd, g)
			systems := []blockio.System{&blockio.Nearstore{Exe: exe, Size: n, ServerCPUs: serverCPUs, Logger: log, PollSpin: pollSpin}}
			switch baseline {
			case "nbdkit":
				nb := &blockio.Nbdkit{Size: n, Threads: nbdThreads, ServerCPUs: serverCPUs, ClientCPUs: clientCPUs}
				if err := nb.Available(); err != nil {
					return err
				}
				systems = append(systems, nb)
			case "none":
			default:
				return fmt.Errorf("--baseline %q: want nbdkit or none", baseline)
			}
			if floor {
				systems = append(systems, &blockio.PingPong{})
			}
			pinning := ""
			if clientCPUs != "" {
				if _, err := proc.Pin(clientCPUs); err != nil {
					return err
				}
				pinning = "client (this process, fio) on CPUs " + clientCPUs
			}
			if serverCPUs != "" {
				if pinning != "" {
					pinning += "; "
				}
				pinning += "servers (nearstore target, nbdkit) on CPUs " + serverCPUs
			}
			stopProfile, err := startCPUProfile(cpuprof)
			if err != nil {
				return err
			}
			defer stopProfile()
			cfg := blockio.CompareConfig{Systems: systems, Points: points, Repeat: repeat, Duration: dur}
			if !quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "starting %d system(s) and filling %s on each…\n", len(systems), volume.FormatSize(n))
				cfg.Progress = rateBar("IOPS")
			}
			res, err := blockio.Compare(ctx, cfg)
			if res != nil {
				res.Machine.Pinning = pinning
			}
			if res == nil || len(res.Rows) == 0 {
				return err
			}
			if perr := printComparison(out, res, asJSON, asMarkdown); perr != nil {
				return errors.Join(err, perr)
			}
			if plotFile != "" && err == nil {
				if err := blockio.SavePlot(plotFile, res); err != nil {
					return err
				}
				if !asJSON {
					fmt.Fprintf(out, "plot: %s\n", plotFile)
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&repeat, "repeat", 3, "runs per configuration and system (medians are reported)")
	f.DurationVar(&dur, "duration", 5*time.Second, "length of each run")
	f.StringVar(&size, "size", "1GiB", "size of each memory volume (the region random I/O covers)")
	f.StringSliceVar(&configs, "configs", defaultConfigs(), "configurations RW:QD:QUEUES[:BS]")
	f.StringVar(&baseline, "baseline", "nbdkit", "baseline to compare with: nbdkit or none")
	f.IntVar(&nbdThreads, "nbdkit-threads", 0, "nbdkit --threads (0: nbdkit's default)")
	f.StringVar(&clientCPUs, "client-cpus", "", "pin the clients (this process and fio) to these CPUs (taskset list)")
	f.StringVar(&serverCPUs, "server-cpus", "", "pin the servers (nearstore target and nbdkit) to these CPUs (taskset list)")
	f.StringVar(&plotFile, "plot", "", "write a bar chart of the medians to this file (.png, .svg or .pdf)")
	f.StringVar(&cpuprof, "cpuprofile", "", "write a CPU profile of this process (the nearstore client side) to this file")
	f.BoolVar(&asJSON, "json", false, "print every run and the medians as JSON")
	f.BoolVar(&asMarkdown, "markdown", false, "print the table as Markdown")
	f.BoolVar(&quiet, "quiet", false, "no live progress")
	f.DurationVar(&pollSpin, "poll-spin", 0, "nearstore target and host: how long a queue's reader polls before it sleeps (0: their default; negative: never)")
	f.BoolVar(&floor, "pingpong", true, "also measure the floor: bare Go TCP ping-pong on loopback moving the same bytes")
	return cmd
}

func defaultConfigs() []string {
	var s []string
	for _, p := range blockio.DefaultPoints() {
		s = append(s, p.String())
	}
	return s
}

func printComparison(w io.Writer, c *blockio.Comparison, asJSON, asMarkdown bool) error {
	if asJSON {
		return writeJSON(w, c)
	}
	m := c.Machine
	fmt.Fprintf(w, "machine: %d CPUs (%s), kernel %s, %s, GOMAXPROCS %d\n", m.CPUs, m.CPUModel, m.Kernel, m.Go, m.GOMAXPROCS)
	if m.Pinning != "" {
		fmt.Fprintf(w, "pinning: %s\n", m.Pinning)
	} else {
		fmt.Fprintln(w, "pinning: none")
	}
	for i, s := range c.Systems {
		fmt.Fprintf(w, "%s: %s\n", s, c.Versions[i])
	}
	fmt.Fprintf(w, "medians of %d runs of %gs each\n\n", c.Repeat, c.Duration)
	write := blockio.WriteTable
	if asMarkdown {
		write = blockio.WriteMarkdown
	}
	if err := write(w, c); err != nil {
		return err
	}
	return report.WriteBars(w, c.Bars)
}

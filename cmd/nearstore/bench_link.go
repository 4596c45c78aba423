package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nearstore/nearstore/bench/link"
	"github.com/spf13/cobra"
)

// linkReport is what "bench link" measured: every run and, per path and
// direction, the median.
type linkReport struct {
	Asked    string        `json:"asked"`              // the rate asked for, normalized
	AskedBps uint64        `json:"asked_bits_per_sec"` // the same in bits per second
	Link     string        `json:"link"`               // how the shaped side was made (or why it was not)
	Shaped   bool          `json:"shaped"`
	Fallback string        `json:"fallback,omitempty"`
	Duration float64       `json:"duration_seconds"`
	Streams  int           `json:"streams"`
	Repeat   int           `json:"repeat"`
	Results  []linkSummary `json:"results"`
	// Load is the machine's load average (/proc/loadavg: 1, 5, 15 min)
	// before and after the runs: the link is emulated in software, so
	// other work on the machine's CPUs lowers what it achieves.
	Load [2]string `json:"load,omitempty"`
}

type linkSummary struct {
	Path      string            `json:"path"` // "shaped" or "loopback"
	Direction string            `json:"direction"`
	Gbps      float64           `json:"gbps"`            // median of the runs
	Ratio     float64           `json:"ratio,omitempty"` // Gbps / asked; shaped path only
	Runs      []link.Throughput `json:"runs"`
}

func newBenchLinkCmd(g *globals) *cobra.Command {
	var (
		rate           string
		dur            time.Duration
		repeat, stream int
		asJSON         bool
	)
	cmd := &cobra.Command{
		Use:   "link",
		Short: "Measure the emulated network link (netns + veth + tc tbf) against loopback",
		Long: `link checks what the benchmarks' emulated link delivers. It opens the link
other benchmarks open with --link (a network namespace behind a veth pair,
both ends shaped with tc tbf to --rate), listens inside the namespace as an
in-process target does, and measures TCP throughput from this process to the
namespace and back, each for --duration, then does the same over loopback.
Each measurement runs --repeat times; the table shows medians, and for the
shaped link the ratio of what it achieved to what was asked.

Where the shaped link cannot be made (not root, no ip or tc, no network
namespaces) the shaped rows are measured over loopback instead and the
report says why. Needs root for the namespace.`,
		Example: `  nearstore bench link --rate 10gbit
  nearstore bench link --rate 25gbit --duration 5s --repeat 5 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if repeat < 1 {
				return fmt.Errorf("--repeat %d: want at least 1", repeat)
			}
			if dur <= 0 {
				return fmt.Errorf("--duration %v: want a positive duration", dur)
			}
			bits, norm, err := link.ParseRate(rate)
			if err != nil {
				return fmt.Errorf("--rate: %w", err)
			}
			rep, err := runBenchLink(cmd.Context(), benchLinkConfig{
				rate: norm, bits: bits, dur: dur, repeat: repeat, streams: stream,
				log: benchLogger(cmd, g), progress: cmd.ErrOrStderr(),
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, rep)
			}
			return writeLinkTable(out, rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&rate, "rate", "10gbit", "link rate as tc writes it (10gbit, 25gbit, 500mbit, 100mbps = bytes/s)")
	f.DurationVar(&dur, "duration", 3*time.Second, "how long each measurement sends")
	f.IntVar(&repeat, "repeat", 3, "measurements per path and direction (medians are reported)")
	f.IntVar(&stream, "streams", 1, "TCP connections per measurement")
	f.BoolVar(&asJSON, "json", false, "print every run and the medians as JSON")
	return cmd
}

type benchLinkConfig struct {
	rate     string
	bits     uint64
	dur      time.Duration
	repeat   int
	streams  int
	log      *slog.Logger
	progress io.Writer
}

// runBenchLink measures the shaped link and loopback, both directions,
// alternating paths so that drift in the machine's load hits both alike.
func runBenchLink(ctx context.Context, cfg benchLinkConfig) (*linkReport, error) {
	shaped, err := link.Open(ctx, cfg.rate, cfg.log)
	if err != nil {
		return nil, err
	}
	defer shaped.Close()
	loop, err := link.Open(ctx, "loopback", cfg.log)
	if err != nil {
		return nil, err
	}
	defer loop.Close()
	rep := &linkReport{
		Asked: cfg.rate, AskedBps: cfg.bits, Link: shaped.String(), Shaped: shaped.Shaped(),
		Fallback: shaped.Fallback(), Duration: cfg.dur.Seconds(), Streams: max(cfg.streams, 1), Repeat: cfg.repeat,
	}
	rep.Load[0] = loadAvg()
	paths := []struct {
		name string
		l    *link.Link
	}{{"shaped", shaped}, {"loopback", loop}}
	dirs := []link.Direction{link.HostToTarget, link.TargetToHost}
	runs := make(map[string][]link.Throughput)
	for i := range cfg.repeat {
		for _, p := range paths {
			for _, d := range dirs {
				if cfg.progress != nil {
					fmt.Fprintf(cfg.progress, "… %s %s, run %d of %d\n", p.name, d, i+1, cfg.repeat)
				}
				t, err := link.Measure(ctx, p.l, d, cfg.dur, cfg.streams)
				if err != nil {
					return nil, fmt.Errorf("%s link, %s: %w", p.name, d, err)
				}
				k := p.name + "\x00" + d.String()
				runs[k] = append(runs[k], t)
			}
		}
	}
	rep.Load[1] = loadAvg()
	for _, p := range paths {
		for _, d := range dirs {
			rs := runs[p.name+"\x00"+d.String()]
			s := linkSummary{Path: p.name, Direction: d.String(), Gbps: medianGbps(rs), Runs: rs}
			if p.name == "shaped" && cfg.bits > 0 {
				s.Ratio = s.Gbps * 1e9 / float64(cfg.bits)
			}
			rep.Results = append(rep.Results, s)
		}
	}
	return rep, nil
}

// loadAvg returns the first three fields of /proc/loadavg, or "" where
// there is none.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func medianGbps(rs []link.Throughput) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r.Gbps
	}
	slices.Sort(v)
	switch n := len(v); {
	case n == 0:
		return 0
	case n%2 == 1:
		return v[n/2]
	default:
		return (v[n/2-1] + v[n/2]) / 2
	}
}

func writeLinkTable(w io.Writer, rep *linkReport) error {
	fmt.Fprintf(w, "link: %s\n", rep.Link)
	fmt.Fprintf(w, "asked %s (%.3f Gbit/s); %d stream(s), %v per run, median of %d\n\n",
		rep.Asked, float64(rep.AskedBps)/1e9, rep.Streams, time.Duration(rep.Duration*float64(time.Second)), rep.Repeat)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tdirection\tasked Gbit/s\tachieved Gbit/s\tachieved/asked\truns (Gbit/s)\t")
	for _, s := range rep.Results {
		asked, ratio := "-", "-"
		if s.Path == "shaped" {
			asked = fmt.Sprintf("%.3f", float64(rep.AskedBps)/1e9)
			ratio = fmt.Sprintf("%.3f", s.Ratio)
		}
		var runs []byte
		for i, r := range s.Runs {
			if i > 0 {
				runs = append(runs, ' ')
			}
			runs = fmt.Appendf(runs, "%.2f", r.Gbps)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%s\t%s\t\n", s.Path, s.Direction, asked, s.Gbps, ratio, runs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.Shaped {
		// tbf meters whole Ethernet frames; a 1500-byte-MTU TCP stream
		// with timestamps carries 1448 payload bytes per 1514-byte frame.
		fmt.Fprintf(w, "\ntbf counts frame bytes: TCP payload can reach at most %.3f of the asked rate (1448/1514)\n", 1448.0/1514)
	}
	if rep.Load[0] != "" {
		fmt.Fprintf(w, "\nload average before %s, after %s (the link is emulated on these CPUs)\n", rep.Load[0], rep.Load[1])
	}
	if !rep.Shaped {
		_, err := fmt.Fprintf(w, "\nthe shaped rows ran over loopback: %s\n", rep.Fallback)
		return err
	}
	return nil
}

package lsmpushbench

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/nearstore/nearstore/bench/report"
)

// label names a variant: the mode, and pushdown's runtime and sampling
// rate.
func (v variant) label() string {
	if v.Mode == ModePushdown {
		return fmt.Sprintf("pushdown %s %g%%", v.Runtime, 100*v.SampleRate)
	}
	return v.Mode
}

// Print writes the report as a table, then the bars.
func Print(w io.Writer, rep *Report) error {
	t := &report.TableWriter{W: w}
	ld := rep.Load
	t.Printf("kv/lsm Gets over NVMe/TCP, %s, %d threads, %d runs of %gs per point (medians)\n", rep.Volume, rep.Threads, rep.Repeat, rep.RunSecs)
	t.Printf("database: %d records of %d bytes, tables per level %v, %.1f MiB of tables; indexes and filters %.2f MiB, pinned in memory; block cache %.1f MiB (%.1f%% of the data blocks)\n",
		ld.Records, ld.ValueSize, ld.Levels, float64(ld.TableBytes)/(1<<20), float64(ld.PinnedBytes)/(1<<20), float64(ld.BlockCache)/(1<<20), 100*ld.CacheRatio)
	t.Printf("%-4s %-8s %-22s %5s %10s %9s %9s %9s %8s %9s %9s %9s %7s\n", "wl", "keys", "mode", "thr", "ops/s", "p50 µs", "p99 µs", "p99.9 µs", "cmds/op", "host µs", "tgt µs", "net B/op", "hit %")
	for _, p := range rep.Points {
		t.Printf("%-4s %-8s %-22s %5d %10.0f %9.0f %9.0f %9.0f %8.2f %9.1f %9.1f %9.0f %7.1f\n", p.Workload, p.Dist, p.label(), p.Threads, p.OpsPerSec,
			p.P50Micros, p.P99Micros, p.P999Micros, p.RoundTrips, p.HostCPU, p.TargetCPU, p.NetBytes, 100*p.CacheHitRate)
	}
	if t.Err != nil {
		return t.Err
	}
	return report.WriteBars(w, rep.Bars)
}

// SavePlot draws throughput per workload and mode (bars, with p99 in the
// labels) into file, in the format its extension names.
func SavePlot(file string, rep *Report) error {
	if rep == nil || len(rep.Points) == 0 {
		return errors.New("bench: nothing to plot")
	}
	type group struct{ wl, dist string }
	var wls []group
	for _, p := range rep.Points {
		g := group{p.Workload, p.Dist}
		if len(wls) == 0 || wls[len(wls)-1] != g {
			wls = append(wls, g)
		}
	}
	threads := map[int]bool{}
	for _, p := range rep.Points {
		threads[p.Threads] = true
	}
	var plots []*plot.Plot
	for _, g := range wls {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("YCSB %s %s, on offloadfs over NVMe/TCP (%s)", g.wl, g.dist, rep.Volume)
		p.Y.Label.Text = "Gets+updates per second (median)"
		p.Y.Tick.Marker = report.KiloTicks{}
		var vals plotter.Values
		var names []string
		for _, pt := range rep.Points {
			if pt.Workload != g.wl || pt.Dist != g.dist {
				continue
			}
			vals = append(vals, pt.OpsPerSec)
			name := pt.label()
			if len(threads) > 1 {
				name += fmt.Sprintf(" ×%d", pt.Threads)
			}
			names = append(names, fmt.Sprintf("%s\n%.2f cmds/op", name, pt.RoundTrips))
		}
		bars, err := plotter.NewBarChart(vals, vg.Points(30))
		if err != nil {
			return err
		}
		p.Add(bars, plotter.NewGrid())
		p.NominalX(names...)
		p.Y.Min = 0
		plots = append(plots, p)
	}
	sweep, err := samplingPlot(rep)
	if err != nil {
		return err
	}
	if sweep != nil {
		plots = append(plots, sweep)
	}
	return report.SaveByExtension(file, func(w io.Writer, format string) error {
		width := vg.Length(len(rep.Points)/len(wls)) * 1.5 * vg.Inch
		width = max(width, 6*vg.Inch)
		img, err := draw.NewFormattedCanvas(width, vg.Length(len(plots))*4*vg.Inch, format)
		if err != nil {
			return err
		}
		tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Points(10)}
		canvases := plot.Align(columnOf(plots), tiles, draw.New(img))
		for i, p := range plots {
			p.Draw(canvases[i][0])
		}
		_, err = img.WriteTo(w)
		return err
	})
}

func columnOf(ps []*plot.Plot) [][]*plot.Plot {
	out := make([][]*plot.Plot, len(ps))
	for i, p := range ps {
		out[i] = []*plot.Plot{p}
	}
	return out
}

// samplingPlot draws the cache-sampling sweep as BPF-oF's Figure 8 does:
// for each workload and key distribution, pushdown's throughput at each
// sampling rate (its best over the runtimes and concurrencies measured)
// relative to plain's best; nil when fewer than two rates were measured.
func samplingPlot(rep *Report) (*plot.Plot, error) {
	var rates []float64
	type group struct{ wl, dist string }
	var groups []group
	bestOf := map[group]map[float64]float64{}
	plain := map[group]float64{}
	for _, pt := range rep.Points {
		g := group{pt.Workload, pt.Dist}
		switch pt.Mode {
		case ModePlain:
			plain[g] = max(plain[g], pt.OpsPerSec)
		case ModePushdown:
			if !slices.Contains(rates, pt.SampleRate) {
				rates = append(rates, pt.SampleRate)
			}
			if bestOf[g] == nil {
				bestOf[g] = map[float64]float64{}
				groups = append(groups, g)
			}
			bestOf[g][pt.SampleRate] = max(bestOf[g][pt.SampleRate], pt.OpsPerSec)
		}
	}
	if len(rates) < 2 {
		return nil, nil
	}
	slices.Sort(rates)
	p := plot.New()
	p.Title.Text = "Cache sampling: pushdown throughput relative to plain kv/lsm (BPF-oF's Figure 8)"
	p.Y.Label.Text = "pushdown / plain ops/s"
	p.X.Label.Text = "sampling rate"
	names := make([]string, len(rates))
	for i, r := range rates {
		names[i] = fmt.Sprintf("%g%%", 100*r)
	}
	p.NominalX(names...)
	p.Add(plotter.NewGrid())
	for i, g := range groups {
		if plain[g] == 0 {
			continue
		}
		var xy plotter.XYs
		for j, r := range rates {
			if v, ok := bestOf[g][r]; ok {
				xy = append(xy, plotter.XY{X: float64(j), Y: v / plain[g]})
			}
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, fmt.Errorf("bench: plot: %w", err)
		}
		c := plotutil.Color(i)
		line.Color, points.Color = c, c
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(fmt.Sprintf("YCSB %s %s", g.wl, g.dist), line, points)
	}
	p.Legend.Top = true
	p.Y.Min = 0
	return p, nil
}

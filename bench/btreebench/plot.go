package btreebench

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"slices"

	"github.com/nearstore/nearstore/bench/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotBTree draws r as BPF-oF draws BPF-KV: p99 latency against
// throughput, one curve per mode through the points of the thread sweep
// (each labelled with its thread count), the saturated point of each
// mode ringed.
func plotBTree(r *Report) (*plot.Plot, error) {
	if r == nil || len(r.Points) == 0 {
		return nil, errors.New("bench: nothing to plot")
	}
	p := plot.New()
	t := r.Tree
	cached := "no cache"
	if t.CacheLevels > 0 {
		cached = fmt.Sprintf("top %d cached", t.CacheLevels)
	}
	p.Title.Text = fmt.Sprintf("BPF-KV lookups over NVMe/TCP: %s keys, %d levels (fanout %d), %s, %s, btree_lookup in %s",
		countLabel(t.Keys), t.Depth, t.Fanout, cached, r.Device, r.Runtime)
	if x := r.Ratios; x != nil {
		p.Title.Text += fmt.Sprintf("\npushdown: %.2f× throughput, %.2f× fewer round trips, %.2f× less CPU per lookup", x.Throughput, x.RoundTrips, x.TotalCPU)
	}
	if r.Machine.Pinning != "" {
		p.Title.Text += "\n" + r.Machine.Pinning
	}
	p.X.Label.Text = "throughput (lookups/s)"
	p.Y.Label.Text = "p99 latency (µs, log scale)"
	// Latency spans milliseconds to a second once queues build up: a log
	// scale keeps the knee of each curve readable.
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.X.Min = 0
	p.X.Tick.Marker = report.KiloTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Add(plotter.NewGrid())

	colors := map[string]color.RGBA{
		"plain":    {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
		"pushdown": {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	}
	var modes []string
	for _, pt := range r.Points {
		if !slices.Contains(modes, pt.Mode) {
			modes = append(modes, pt.Mode)
		}
	}
	var xmax, ymax float64
	ymin := math.Inf(1)
	for i, m := range modes {
		var xy plotter.XYs
		var labels []string
		for _, pt := range r.Points {
			if pt.Mode == m {
				xy = append(xy, plotter.XY{X: pt.OpsPerSec, Y: pt.P99us})
				labels = append(labels, fmt.Sprint(pt.Threads))
				xmax, ymax, ymin = max(xmax, pt.OpsPerSec), max(ymax, pt.P99us), min(ymin, pt.P99us)
			}
		}
		c, ok := colors[m]
		if !ok {
			c = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, fmt.Errorf("bench: plot: %w", err)
		}
		line.Color = c
		line.Width = vg.Points(1.5)
		points.Color = c
		points.Shape = draw.CircleGlyph{}
		if i%2 == 1 {
			points.Shape = draw.TriangleGlyph{}
		}
		points.Radius = vg.Points(3)
		p.Add(line, points)
		p.Legend.Add(m, line, points)
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: xy, Labels: labels})
		if err != nil {
			return nil, fmt.Errorf("bench: plot: %w", err)
		}
		for k := range l.TextStyle {
			l.TextStyle[k].Font.Size = vg.Points(7)
			l.TextStyle[k].Color = c
		}
		l.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(3)}
		p.Add(l)
	}
	for _, s := range r.Saturated {
		ring, err := plotter.NewScatter(plotter.XYs{{X: s.OpsPerSec, Y: s.P99us}})
		if err != nil {
			return nil, fmt.Errorf("bench: plot: %w", err)
		}
		ring.Shape = draw.RingGlyph{}
		ring.Radius = vg.Points(7)
		ring.Color = colors[s.Mode]
		p.Add(ring)
	}
	if ymin <= 0 || math.IsInf(ymin, 0) {
		return nil, errors.New("bench: plot: no latencies")
	}
	p.X.Max = xmax * 1.12
	p.Y.Min, p.Y.Max = ymin/1.5, ymax*1.5
	return p, nil
}

// countLabel prints a key count briefly: "1Mi", "2000".
func countLabel(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%dMi", n>>20)
	}
	if n >= 1e6 {
		return fmt.Sprintf("%.2gM", float64(n)/1e6)
	}
	return fmt.Sprint(n)
}

// SavePlot renders r's chart (see plotBTree), 8 by 6 inches, to path in
// the format its extension names ("png", "svg", "pdf").
func SavePlot(path string, r *Report) error {
	return report.SavePlot(path, 8*vg.Inch, 6*vg.Inch, func() (*plot.Plot, error) { return plotBTree(r) })
}

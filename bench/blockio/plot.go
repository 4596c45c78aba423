package blockio

import (
	"errors"
	"fmt"
	"image/color"
	"strings"

	"github.com/nearstore/nearstore/bench/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotComparison draws c as a grouped bar chart: one group per point, one
// bar per system (its median IOPS), and the ratio of the first system to
// the second above each group.
func plotComparison(c *Comparison) (*plot.Plot, error) {
	if c == nil || len(c.Rows) == 0 || len(c.Systems) == 0 {
		return nil, errors.New("bench: nothing to plot")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Block I/O over loopback: median IOPS of %d runs of %gs", c.Repeat, c.Duration)
	if len(c.Systems) > 1 {
		p.Title.Text += fmt.Sprintf(" (labels: %s ÷ %s)", c.Systems[0], c.Systems[1])
	}
	if c.Machine.Pinning != "" {
		p.Title.Text += "\n" + c.Machine.Pinning
	}
	p.Y.Label.Text = "IOPS"
	p.Y.Min = 0
	p.Y.Tick.Marker = report.KiloTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Add(plotter.NewGrid())
	p.X.Tick.Label.Font.Size = vg.Points(9)

	// Bar colours, one per system, in order.
	colors := [...]color.RGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
		{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
		{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
	}
	n := len(c.Systems)
	width := vg.Points(18)
	var top float64
	for i, s := range c.Systems {
		vs := make(plotter.Values, len(c.Rows))
		for j, r := range c.Rows {
			vs[j] = r.Median[s].IOPS
			top = max(top, vs[j])
		}
		bars, err := plotter.NewBarChart(vs, width)
		if err != nil {
			return nil, fmt.Errorf("bench: plot: %w", err)
		}
		bars.Color = colors[i%len(colors)]
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(bars)
		p.Legend.Add(s, bars)
	}
	labels := make([]string, len(c.Rows))
	for j, r := range c.Rows {
		labels[j] = strings.Replace(r.Point.Label(), " QD", "\nQD", 1)
	}
	report.NominalBars(p, labels...)
	p.Y.Max = top * 1.25
	if n > 1 {
		xy := plotterXYLabels(c, top)
		l, err := report.CenteredLabels(xy, vg.Points(9))
		if err != nil {
			return nil, err
		}
		p.Add(l)
	}
	return p, nil
}

// plotterXYLabels puts "1.23×" above each group, just over its tallest bar.
func plotterXYLabels(c *Comparison, top float64) plotter.XYLabels {
	xy := plotter.XYLabels{XYs: make(plotter.XYs, len(c.Rows)), Labels: make([]string, len(c.Rows))}
	for j, r := range c.Rows {
		var hi float64
		for _, s := range c.Systems {
			hi = max(hi, r.Median[s].IOPS)
		}
		xy.XYs[j] = plotter.XY{X: float64(j), Y: hi + top*0.02}
		xy.Labels[j] = fmt.Sprintf("%.2f×", r.Ratio)
	}
	return xy
}

// SavePlot renders c's chart (see plotComparison), 10 by 5 inches, to
// path in the format its extension names ("png", "svg", "pdf").
func SavePlot(path string, c *Comparison) error {
	return report.SavePlot(path, 10*vg.Inch, 5*vg.Inch, func() (*plot.Plot, error) { return plotComparison(c) })
}

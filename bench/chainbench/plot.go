package chainbench

import (
	"errors"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/nearstore/nearstore/bench/report"
)

// plotChain draws each run's throughput, CRRS beside tail-only, with the
// medians and p99s in the title.
func plotChain(r *Report) (*plot.Plot, error) {
	if r == nil || len(r.Points) == 0 {
		return nil, errors.New("bench: nothing to plot")
	}
	p := plot.New()
	c, t := r.Median["crrs"], r.Median["tail"]
	p.Title.Text = fmt.Sprintf("Chain replication, R = %d, %.0f%% reads, node read IOPS %s: CRRS %.2f× tail-only\nmedian ops/s %.0f vs %.0f, p99 %.0f µs vs %.0f µs",
		r.Config.Nodes, 100*r.Config.ReadFraction, iopsLabel(r.Config.ReadIOPS), r.Ratio, c.OpsPerSec, t.OpsPerSec, c.P99us, t.P99us)
	p.Y.Label.Text = "throughput (ops/s)"
	p.X.Label.Text = "run"
	p.Y.Min = 0
	p.Y.Tick.Marker = report.KiloTicks{}
	p.Legend.Top = true
	w := vg.Points(14)
	var names []string
	for i, mode := range []string{"crrs", "tail"} {
		var vals plotter.Values
		for _, pt := range r.Points {
			if pt.Mode == mode {
				vals = append(vals, pt.OpsPerSec)
			}
		}
		if i == 0 {
			for j := range vals {
				names = append(names, fmt.Sprint(j+1))
			}
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		b.LineStyle.Width = 0
		b.Offset = vg.Length(2*i-1) * w / 2
		if mode == "crrs" {
			b.Color = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
			p.Legend.Add("CRRS (clean replicas)", b)
		} else {
			b.Color = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
			p.Legend.Add("tail only", b)
		}
		p.Add(b)
	}
	p.NominalX(names...)
	return p, nil
}

// SavePlot writes the plot to path in the format its extension names.
func SavePlot(path string, r *Report) error {
	return report.SavePlot(path, 8*vg.Inch, 5*vg.Inch, func() (*plot.Plot, error) { return plotChain(r) })
}

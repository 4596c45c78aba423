package leedbench

import (
	"errors"
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/nearstore/nearstore/bench/report"
)

// plotReport draws the medians' throughput: one bar per store for every
// workload and value size.
func plotReport(r *Report) (*plot.Plot, error) {
	if r == nil || len(r.Medians) == 0 {
		return nil, errors.New("bench: nothing to plot")
	}
	var labels []string
	idx := map[string]int{}
	for _, p := range r.Medians {
		l := fmt.Sprintf("%s %dB", p.Workload, p.ValueSize)
		if _, ok := idx[l]; !ok {
			idx[l] = len(labels)
			labels = append(labels, l)
		}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("LEED (NVMe KV command set) vs kv/lsm on offloadfs, over NVMe/TCP, simulated NAND\nmedians of %d runs, %d threads", r.Config.Repeat, r.Config.Threads)
	p.Y.Label.Text = "throughput (ops/s)"
	p.Y.Tick.Marker = report.KiloTicks{}
	p.Legend.Top = true
	w := vg.Points(7)
	colors := map[string]color.RGBA{"leed": {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, "lsm": {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}}
	for i, store := range []string{"leed", "lsm"} {
		vals := make(plotter.Values, len(labels))
		any := false
		for _, m := range r.Medians {
			if m.Store == store {
				vals[idx[fmt.Sprintf("%s %dB", m.Workload, m.ValueSize)]] = m.OpsPerSec
				any = true
			}
		}
		if !any {
			continue
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		b.Color = colors[store]
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-0.5) * w
		p.Add(b)
		p.Legend.Add(store, b)
	}
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = 0.6
	p.X.Tick.Label.XAlign = -1
	return p, nil
}

// WritePlot renders the report's chart in format ("png", "svg", "pdf").
func WritePlot(w io.Writer, format string, r *Report) error {
	p, err := plotReport(r)
	if err != nil {
		return err
	}
	wt, err := p.WriterTo(10*vg.Inch, 5*vg.Inch, format)
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

// SavePlot writes the report's chart to path, in the format its extension
// names.
func SavePlot(path string, r *Report) error {
	return report.SaveByExtension(path, func(w io.Writer, format string) error { return WritePlot(w, format, r) })
}

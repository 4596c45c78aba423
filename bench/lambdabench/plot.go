package lambdabench

import (
	"errors"
	"fmt"
	"io"

	"github.com/nearstore/nearstore/bench/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/nearstore/nearstore/volume"
)

// plotLambda draws a run as λ-IO's Figure 4 does: one bar per mode, its
// median throughput normalized to B's (to the first mode's without B),
// labelled with the absolute MB/s.
func plotLambda(r *Report) (*plot.Plot, error) {
	if r == nil || len(r.Modes) == 0 {
		return nil, errors.New("bench: nothing to plot")
	}
	base, baseName := r.Modes[0].MBps, r.Modes[0].Mode
	for _, m := range r.Modes {
		if m.Mode == "B" {
			base, baseName = m.MBps, "B"
		}
	}
	if base <= 0 {
		return nil, errors.New("bench: plot: no throughput to normalize to")
	}
	p := plot.New()
	what := r.App
	if r.Query != "" {
		what = fmt.Sprintf("TPC-H %s, SF %g", r.Query, r.SF)
	}
	cache := "cold cache"
	if r.Warm > 0 {
		cache = fmt.Sprintf("%.0f%% warm (%s)", 100*r.Warm, r.WarmOrder)
	}
	link := "loopback"
	switch {
	case r.LinkShaped:
		link = r.LinkRate + " link (tc tbf)"
	case r.Link != "loopback":
		link = "loopback (shaping unavailable)"
	}
	runs := fmt.Sprintf("medians of %d runs", r.Repeat)
	if r.Interleave > 0 {
		runs += fmt.Sprintf(", interleaved every %d", r.Interleave)
	}
	p.Title.Text = fmt.Sprintf("%s (%s, %s), %s\n%s; %s requests, %d in flight; %s",
		what, r.Runtime, volume.FormatSize(r.Size), cache, link, volume.FormatSize(int64(r.RequestSize)), r.Depth, runs)
	p.Y.Label.Text = fmt.Sprintf("throughput normalized to %s", baseName)
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	vs := make(plotter.Values, len(r.Modes))
	labels := make([]string, len(r.Modes))
	xy := plotter.XYLabels{}
	var top float64
	for i, m := range r.Modes {
		vs[i] = m.MBps / base
		top = max(top, vs[i])
		labels[i] = m.Mode
		if m.Mode == "lambda" {
			labels[i] = "λ"
		}
		xy.XYs = append(xy.XYs, plotter.XY{X: float64(i), Y: vs[i]})
		label := fmt.Sprintf("%.2f×\n%.0f MB/s", vs[i], m.MBps)
		if m.Mode == "lambda" {
			// Where the dispatcher sent the median run's calls.
			label = formatRan(m.Ran, 0) + "\n" + label
		}
		xy.Labels = append(xy.Labels, label)
	}
	bars, err := report.Bars(vs, vg.Points(36), report.Blue)
	if err != nil {
		return nil, err
	}
	p.Add(bars)
	l, err := report.CenteredLabels(xy, vg.Points(8))
	if err != nil {
		return nil, err
	}
	l.Offset = vg.Point{Y: vg.Points(4)}
	p.Add(l)
	report.NominalBars(p, labels...)
	p.Y.Max = max(top, 1) * 1.3
	return p, nil
}

// SavePlot renders plotLambda to path, in the format its extension
// names, 7 by 4.5 inches.
func SavePlot(path string, r *Report) error {
	return report.SaveByExtension(path, func(w io.Writer, format string) error {
		p, err := plotLambda(r)
		if err != nil {
			return err
		}
		return report.WritePlot(w, p, 7*vg.Inch, 4.5*vg.Inch, format)
	})
}

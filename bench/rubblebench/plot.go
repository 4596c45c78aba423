package rubblebench

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/nearstore/nearstore/bench/report"
)

// modeColors are each mode's (primary, secondaries) colours: the
// primary dark, the secondaries light.
var modeColors = map[string][2]color.Color{
	Baseline: {report.Blue, report.RGB(0xaec7e8)},
	Rubble:   {report.Orange, report.RGB(0xffbb78)},
}

// plots are the two charts, as RubbleDB's Table 3 and Figure 7 give
// them: CPU time per operation per role (primary and secondaries
// stacked, each mode a bar) and throughput, for every R and workload.
func plots(r *Report) (cpu, tput *plot.Plot, err error) {
	if r == nil || len(r.Medians) == 0 {
		return nil, nil, errors.New("bench: nothing to plot")
	}
	type point = struct {
		r  int
		wl string
	}
	var points []point
	var modes []string
	for _, p := range r.Medians {
		if pt := (point{p.Replicas, p.Workload}); !slices.Contains(points, pt) {
			points = append(points, pt)
		}
		if !slices.Contains(modes, p.Mode) {
			modes = append(modes, p.Mode)
		}
	}
	slices.SortStableFunc(points, func(a, b point) int { return a.r - b.r })
	labels := make([]string, len(points))
	for i, pt := range points {
		labels[i] = fmt.Sprintf("R=%d %s", pt.r, pt.wl)
	}
	cpu, tput = plot.New(), plot.New()
	cpu.Title.Text = fmt.Sprintf("CPU time per operation by role (nodes share %d CPUs: the figure to compare)\nmedians of %d runs, %d records of %d B, %d ops per workload",
		r.Machine.CPUs, r.Config.Repeat, r.Config.Records, r.Config.ValueSize, r.Config.Ops)
	cpu.Y.Label.Text = "CPU µs per op"
	tput.Title.Text = "Throughput (follows the machine's load)"
	tput.Y.Label.Text = "ops/s"
	tput.Y.Tick.Marker = report.KiloTicks{}
	for _, p := range []*plot.Plot{cpu, tput} {
		p.Add(plotter.NewGrid()) // first, so the bars are drawn over it
	}
	width := vg.Points(12)
	var cpuTop, tputTop float64
	for i, mode := range modes {
		prim, sec, ops := make(plotter.Values, len(points)), make(plotter.Values, len(points)), make(plotter.Values, len(points))
		for j, pt := range points {
			if p, ok := r.Median(mode, pt.r, pt.wl); ok {
				prim[j], sec[j], ops[j] = p.CPUus.Primary, p.CPUus.Secondaries, p.OpsPerSec
				cpuTop, tputTop = max(cpuTop, p.CPUus.Primary+p.CPUus.Secondaries), max(tputTop, p.OpsPerSec)
			}
		}
		cols, ok := modeColors[mode]
		if !ok {
			cols = [2]color.Color{report.Red, report.Red}
		}
		offset := width * vg.Length(float64(i)-float64(len(modes)-1)/2)
		pb, err := report.Bars(prim, width, cols[0])
		if err != nil {
			return nil, nil, err
		}
		sb, err := report.Bars(sec, width, cols[1])
		if err != nil {
			return nil, nil, err
		}
		pb.Offset = offset // before StackOn, which copies it
		sb.StackOn(pb)
		cpu.Add(pb, sb)
		cpu.Legend.Add(mode+" primary", pb)
		cpu.Legend.Add(mode+" secondaries", sb)
		tb, err := report.Bars(ops, width, cols[0])
		if err != nil {
			return nil, nil, err
		}
		tb.Offset = offset
		tput.Add(tb)
		tput.Legend.Add(mode, tb)
	}
	if err := ratioLabels(cpu, r, points, cpuTop); err != nil {
		return nil, nil, err
	}
	cpu.Y.Max, tput.Y.Max = max(cpuTop, 1)*1.35, max(tputTop, 1)*1.35
	for _, p := range []*plot.Plot{cpu, tput} {
		p.Y.Min = 0
		p.Legend.Top = true
		report.NominalBars(p, labels...)
		p.X.Tick.Label.Rotation = 0.5
		p.X.Tick.Label.XAlign = draw.XRight
	}
	return cpu, tput, nil
}

// ratioLabels puts rubble's total CPU per operation as a multiple of
// the baseline's above each point both modes measured.
func ratioLabels(p *plot.Plot, r *Report, points []struct {
	r  int
	wl string
}, top float64) error {
	xy := plotter.XYLabels{}
	for j, pt := range points {
		b, okB := r.Median(Baseline, pt.r, pt.wl)
		rb, okR := r.Median(Rubble, pt.r, pt.wl)
		if !okB || !okR || b.CPUus.Total <= 0 {
			continue
		}
		y := max(b.CPUus.Primary+b.CPUus.Secondaries, rb.CPUus.Primary+rb.CPUus.Secondaries) + top*0.03
		xy.XYs = append(xy.XYs, plotter.XY{X: float64(j), Y: y})
		xy.Labels = append(xy.Labels, fmt.Sprintf("%.2f×", rb.CPUus.Total/b.CPUus.Total))
	}
	if len(xy.XYs) == 0 {
		return nil
	}
	l, err := report.CenteredLabels(xy, plotter.DefaultFontSize)
	if err != nil {
		return err
	}
	p.Add(l)
	p.Title.Text += "\nlabels: rubble ÷ baseline, total CPU per op"
	return nil
}

// WritePlot renders the two charts, one above the other, in format
// ("png", "svg", "pdf").
func WritePlot(w io.Writer, format string, r *Report) error {
	cpu, tput, err := plots(r)
	if err != nil {
		return err
	}
	c, err := draw.NewFormattedCanvas(11*vg.Inch, 9*vg.Inch, format)
	if err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Millimeter * 6, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	cs := plot.Align([][]*plot.Plot{{cpu}, {tput}}, tiles, draw.New(c))
	cpu.Draw(cs[0][0])
	tput.Draw(cs[1][0])
	_, err = c.WriteTo(w)
	return err
}

// SavePlot writes the charts to path in the format its extension names.
func SavePlot(path string, r *Report) error {
	return report.SaveByExtension(path, func(w io.Writer, format string) error { return WritePlot(w, format, r) })
}

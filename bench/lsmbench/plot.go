package lsmbench

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/nearstore/nearstore/bench/report"
)

// plots are "bench lsm"'s charts: the medians' throughput per
// workload, the engines side by side with kv/lsm's ratio to Pebble above
// each group, and each engine's write amplification on Load.
func plots(rep *Report) ([]*plot.Plot, error) {
	var engines, workloads []string
	byKey := map[string]Phase{}
	for _, p := range rep.Phases {
		if !slices.Contains(engines, p.Engine) {
			engines = append(engines, p.Engine)
		}
		if !slices.Contains(workloads, p.Workload) {
			workloads = append(workloads, p.Workload)
		}
		byKey[p.Engine+"/"+p.Workload] = p
	}
	if len(engines) == 0 {
		return nil, errors.New("plot: no results")
	}
	colors := [...]color.RGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
		{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
		{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
		{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
	}
	sub := fmt.Sprintf("%d records of %d B, %d ops, %d threads, %s; medians of %d runs",
		rep.Records, rep.ValueSize, rep.Ops, rep.Threads, rep.Dist, len(rep.Runs))
	width := vg.Points(20)

	tp := plot.New()
	tp.Title.Text = "YCSB throughput\n" + sub
	if len(engines) == 2 {
		tp.Title.Text += fmt.Sprintf("\nlabels: %s ÷ %s", engines[0], engines[1])
	}
	tp.Y.Label.Text = "ops/s"
	tp.Y.Min = 0
	tp.Legend.Top, tp.Legend.Left = true, true
	tp.Add(plotter.NewGrid())
	var top float64
	for i, e := range engines {
		vs := make(plotter.Values, len(workloads))
		for j, w := range workloads {
			vs[j] = byKey[e+"/"+w].OpsPerSec
			top = max(top, vs[j])
		}
		b, err := report.Bars(vs, width, colors[i%len(colors)])
		if err != nil {
			return nil, fmt.Errorf("plot throughput: %w", err)
		}
		b.Offset = width * vg.Length(float64(i)-float64(len(engines)-1)/2)
		tp.Add(b)
		tp.Legend.Add(e, b)
	}
	if len(engines) == 2 {
		xy := plotter.XYLabels{}
		for j, w := range workloads {
			a, b := byKey[engines[0]+"/"+w].OpsPerSec, byKey[engines[1]+"/"+w].OpsPerSec
			if b <= 0 {
				continue
			}
			xy.XYs = append(xy.XYs, plotter.XY{X: float64(j), Y: max(a, b) + top*0.02})
			xy.Labels = append(xy.Labels, fmt.Sprintf("%.2f×", a/b))
		}
		if len(xy.XYs) > 0 {
			l, err := report.CenteredLabels(xy, plotter.DefaultFontSize)
			if err != nil {
				return nil, fmt.Errorf("plot throughput: %w", err)
			}
			tp.Add(l)
		}
	}
	names := make([]string, len(workloads))
	for j, w := range workloads {
		names[j] = w
		if w != "load" {
			names[j] = "YCSB " + w
		}
	}
	report.NominalBars(tp, names...)
	tp.Y.Max = max(top, 1) * 1.2

	// The second chart: write amplification on Load, or, for the
	// offload experiment, NVMe/TCP bytes per byte written on Load.
	second := func(p Phase) float64 { return p.WriteAmp }
	wp := plot.New()
	wp.Title.Text = "Write amplification on Load\n(bytes written ÷ bytes loaded)"
	wp.Y.Label.Text = "write amplification"
	if slices.ContainsFunc(rep.Phases, func(p Phase) bool { return p.NetPerByteWritten > 0 }) {
		second = func(p Phase) float64 { return p.NetPerByteWritten }
		wp.Title.Text = "Network traffic on Load\n(NVMe/TCP bytes ÷ bytes written)"
		wp.Y.Label.Text = "bytes per byte written"
	}
	wp.Y.Min = 0
	wp.Add(plotter.NewGrid())
	xy := plotter.XYLabels{}
	var wtop float64
	for i, e := range engines {
		wa := second(byKey[e+"/load"])
		wtop = max(wtop, wa)
		vs := make(plotter.Values, len(engines))
		vs[i] = wa
		b, err := report.Bars(vs, vg.Points(36), colors[i%len(colors)])
		if err != nil {
			return nil, fmt.Errorf("plot write amplification: %w", err)
		}
		wp.Add(b)
		xy.XYs = append(xy.XYs, plotter.XY{X: float64(i), Y: wa})
		xy.Labels = append(xy.Labels, fmt.Sprintf("%.2f", wa))
	}
	l, err := report.CenteredLabels(xy, plotter.DefaultFontSize)
	if err != nil {
		return nil, fmt.Errorf("plot write amplification: %w", err)
	}
	l.Offset = vg.Point{Y: vg.Points(4)}
	wp.Add(l)
	short := make([]string, len(engines))
	for i, e := range engines {
		short[i] = strings.TrimPrefix(e, "kv/lsm:") // offload modes
	}
	report.NominalBars(wp, short...)
	wp.Y.Max = max(wtop, 1) * 1.25
	return []*plot.Plot{tp, wp}, nil
}

// SavePlot renders the charts side by side, 11 by 5 inches, to path in
// the format its extension names (png, svg or pdf). A failed render
// leaves no file behind.
func SavePlot(file string, rep *Report) error {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(file), "."))
	plots, err := plots(rep)
	if err != nil {
		return err
	}
	c, err := draw.NewFormattedCanvas(11*vg.Inch, 5*vg.Inch, format)
	if err != nil {
		return fmt.Errorf("plot %s: %w", file, err)
	}
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 8, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	cs := plot.Align([][]*plot.Plot{plots}, tiles, draw.New(c))
	for i, p := range plots {
		p.Draw(cs[0][i])
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		os.Remove(file)
		return fmt.Errorf("plot %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot %s: %w", file, err)
	}
	return nil
}

// Print writes the report as a table: the medians per engine and
// workload, then the bars.
func (rep *Report) Print(w io.Writer) error {
	t := &report.TableWriter{W: w}
	t.Printf("%d records of %d bytes, %d ops, %d threads, %s; medians of %d runs\n", rep.Records, rep.ValueSize, rep.Ops, rep.Threads, rep.Dist, len(rep.Runs))
	t.Printf("%-18s %-10s %12s %10s %10s %10s %7s %7s %9s\n", "engine", "wl", "ops/s", "p50 µs", "p99 µs", "p99.9 µs", "w-amp", "s-amp", "CPU µs/op")
	offload := false
	for _, p := range rep.Phases {
		wa := ""
		if p.WriteAmp > 0 {
			wa = fmt.Sprintf("%.2f", p.WriteAmp)
		}
		t.Printf("%-18s %-10s %12.0f %10.1f %10.1f %10.1f %7s %7.2f %9.1f\n", p.Engine, p.Workload, p.OpsPerSec, p.P50us, p.P99us, p.P999us, wa, p.SpaceAmp, p.CPUus)
		offload = offload || p.NetPerByteWritten > 0
	}
	if offload {
		t.Printf("\noffload detail: NVMe/TCP bytes per byte written, target CPU per op, reads during compactions, tasks at the engine / on the host after it did not\n")
		for _, p := range rep.Phases {
			t.Printf("%-18s %-10s net/B %6.2f  target %7.1f µs/op  reads %7d p99 %9.1f µs  offloaded %d local %d\n", p.Engine, p.Workload,
				p.NetPerByteWritten, p.TargetCPUus, p.ReadsCompacting, p.ReadP99Compacting, p.Offloaded, p.OffloadLocal)
		}
	}
	t.Printf("\nload detail: write amplification by level (L0 = flushes), stalls, settling\n")
	for _, p := range rep.Phases {
		if p.Workload != "load" {
			continue
		}
		t.Printf("%-18s", p.Engine)
		for l, wa := range p.LevelWriteAmp {
			t.Printf(" L%d %.2f", l, wa)
		}
		t.Printf("  stalls %d (%.1fs)  settle %.1fs\n", p.Stalls, p.StallSeconds, p.SettleSeconds)
	}
	if t.Err != nil {
		return t.Err
	}
	return report.WriteBars(w, rep.Bars)
}

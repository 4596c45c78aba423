package report

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// RGB is an opaque colour, 0xRRGGBB.
type RGB uint32

// The colours the benches' charts share, so that a chart's first series,
// its second and its goals look the same in every chart.
const (
	Blue   RGB = 0x1f77b4
	Orange RGB = 0xff7f0e
	Red    RGB = 0xd62728
)

// RGBA implements color.Color.
func (c RGB) RGBA() (r, g, b, a uint32) {
	return color.RGBA{R: uint8(c >> 16), G: uint8(c >> 8), B: uint8(c), A: 0xff}.RGBA()
}

// WritePlot renders p, width by height, to w in format ("png", "svg",
// "pdf"); errors say they come from a bench's plot.
func WritePlot(w io.Writer, p *plot.Plot, width, height vg.Length, format string) error {
	wt, err := p.WriterTo(width, height, format)
	if err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	_, err = wt.WriteTo(w)
	return err
}

// SavePlot has build draw a plot and writes it, width by height, to path
// in the format the path's extension names ("png", "svg", "pdf"). A
// failed build or render leaves no file behind (SaveByExtension).
func SavePlot(path string, width, height vg.Length, build func() (*plot.Plot, error)) error {
	return SaveByExtension(path, func(w io.Writer, format string) error {
		p, err := build()
		if err != nil {
			return err
		}
		return WritePlot(w, p, width, height, format)
	})
}

// Bars is a bar chart of vs, each bar width wide, filled with c and not
// outlined.
func Bars(vs plotter.Valuer, width vg.Length, c color.Color) (*plotter.BarChart, error) {
	b, err := plotter.NewBarChart(vs, width)
	if err != nil {
		return nil, fmt.Errorf("bench: plot: %w", err)
	}
	b.Color = c
	b.LineStyle.Width = 0
	return b, nil
}

// CenteredLabels is labels at xy, in size-point type, each centred on
// its x.
func CenteredLabels(xy plotter.XYLabels, size vg.Length) (*plotter.Labels, error) {
	l, err := plotter.NewLabels(xy)
	if err != nil {
		return nil, fmt.Errorf("bench: plot: %w", err)
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = draw.XCenter
		l.TextStyle[i].Font.Size = size
	}
	return l, nil
}

// NominalBars names p's x axis for one bar (or group of bars) per name,
// the first at x 0, and fits the axis to them, from -0.6 to n-0.4: the
// range GoalLine draws across.
func NominalBars(p *plot.Plot, names ...string) {
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
}

// GoalLine is a dashed line in c at height y across a chart of n nominal
// bars (x from -0.6 to n-0.4, as the charts set their x range).
func GoalLine(y float64, n int, c color.Color) (*plotter.Line, error) {
	line, err := plotter.NewLine(plotter.XYs{{X: -0.6, Y: y}, {X: float64(n) - 0.4, Y: y}})
	if err != nil {
		return nil, fmt.Errorf("bench: plot: %w", err)
	}
	line.Color = c
	line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	return line, nil
}

package report

import (
	"strings"
	"testing"
	"text/tabwriter"

	"gonum.org/v1/plot"
)

// TestWriteTableBars: the table comes out aligned, whole, before the
// bars, each bar saying whether it was met.
func TestWriteTableBars(t *testing.T) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	tw.Write([]byte("mode\trate\nhost\t1.0\n"))
	bars := []Bar{{What: "speedup", Want: ">= 1.5", Got: 2, Met: true}, {What: "cpu", Want: "<= 0.5", Got: 0.75}}
	if err := WriteTableBars(&b, tw, bars); err != nil {
		t.Fatal(err)
	}
	want := "mode  rate\nhost  1.0\n" +
		"\nbar: speedup: want >= 1.5, got 2.000: met" +
		"\nbar: cpu: want <= 0.5, got 0.750: MISSED\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

// TestNominalBars: one tick per name at 0, 1, 2, ..., and the x range
// GoalLine spans.
func TestNominalBars(t *testing.T) {
	p := plot.New()
	NominalBars(p, "host", "target", "split")
	if p.X.Min != -0.6 || p.X.Max != 2.6 {
		t.Errorf("x range [%g, %g], want [-0.6, 2.6]", p.X.Min, p.X.Max)
	}
	ticks := p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max)
	if len(ticks) != 3 {
		t.Fatalf("ticks %+v: want 3", ticks)
	}
	for i, want := range []string{"host", "target", "split"} {
		if ticks[i].Value != float64(i) || ticks[i].Label != want {
			t.Errorf("tick %d = %+v, want %q at %d", i, ticks[i], want, i)
		}
	}
	line, err := GoalLine(1, 3, Red)
	if err != nil {
		t.Fatal(err)
	}
	if xmin, xmax, _, _ := line.DataRange(); xmin != p.X.Min || xmax != p.X.Max {
		t.Errorf("goal line spans [%g, %g], the axis [%g, %g]", xmin, xmax, p.X.Min, p.X.Max)
	}
}

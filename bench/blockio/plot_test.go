package blockio

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/nearstore/nearstore/bench/internal/plottest"
)

func testComparison() *Comparison {
	c := &Comparison{Systems: []string{"nearstore", "nbdkit"}, Repeat: 3, Duration: 5}
	for i, p := range DefaultPoints() {
		a := Result{System: "nearstore", IOPS: float64(10000 * (i + 1))}
		b := Result{System: "nbdkit", IOPS: float64(9000 * (i + 1))}
		c.Rows = append(c.Rows, ComparisonRow{
			Point:  p,
			Runs:   map[string][]Result{"nearstore": {a}, "nbdkit": {b}},
			Median: map[string]Result{"nearstore": a, "nbdkit": b},
			Ratio:  a.IOPS / b.IOPS,
		})
	}
	return c
}

func TestSavePlot(t *testing.T) {
	if b := plottest.SavePNG(t, SavePlot, testComparison()).Bounds(); b.Dx() < 500 || b.Dy() < 250 {
		t.Errorf("image is %v", b)
	}
}

func TestSavePlotSVG(t *testing.T) {
	dir := t.TempDir()
	c := testComparison()
	c.Systems = c.Systems[:1] // one system: no ratio labels
	svg := filepath.Join(dir, "one.svg")
	if err := SavePlot(svg, c); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("no SVG written (%v)", err)
	}
	empty := filepath.Join(dir, "empty.png")
	if err := SavePlot(empty, &Comparison{}); err == nil {
		t.Error("an empty comparison plotted")
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("a failed plot left %s behind (%v)", empty, err)
	}
}

package report

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/nearstore/nearstore/bench/internal/plottest"
)

// TestSavePlot: a built plot is written at the size asked, in the format
// of the path's extension; a failed build leaves no file.
func TestSavePlot(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.png")
	err := SavePlot(ok, 3*vg.Inch, 2*vg.Inch, func() (*plot.Plot, error) {
		p := plot.New()
		b, err := Bars(plotter.Values{1, 2, 3}, vg.Points(10), Blue)
		if err != nil {
			return nil, err
		}
		p.Add(b)
		return p, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	img := plottest.DecodePNG(t, ok)
	// gonum renders PNGs at 96 dpi.
	if b := img.Bounds(); b.Dx() != 3*96 || b.Dy() != 2*96 {
		t.Errorf("image is %dx%d, want %dx%d", b.Dx(), b.Dy(), 3*96, 2*96)
	}

	bad := filepath.Join(dir, "bad.svg")
	boom := errors.New("boom")
	if err := SavePlot(bad, vg.Inch, vg.Inch, func() (*plot.Plot, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("SavePlot with a failing build: %v, want boom", err)
	}
	if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed build left %s: %v", bad, err)
	}
}

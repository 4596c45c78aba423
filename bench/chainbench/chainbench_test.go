package chainbench

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/bench/internal/plottest"
)

func TestTableAndPlot(t *testing.T) {
	r := &Report{Median: map[string]Summary{"crrs": {OpsPerSec: 3000, P99us: 900}, "tail": {OpsPerSec: 1000, P99us: 2500}}, Ratio: 3}
	r.Config.Nodes, r.Config.ReadFraction, r.Config.ReadIOPS = 3, 0.95, 2000
	r.Points = []Point{
		{Mode: "crrs", Run: 1, OpsPerSec: 3000, Reads: 100, ReadsAtTail: 35},
		{Mode: "tail", Run: 1, OpsPerSec: 1000, Reads: 100, ReadsAtTail: 100},
	}
	r.Bars = nil
	plottest.Table(t, WriteTable, r, "crrs median", "35.0%", "100.0%", "node read IOPS 2000")
	if img := plottest.SavePNG(t, SavePlot, r); img.Bounds().Dx() < 100 {
		t.Fatalf("plot is %v", img.Bounds())
	}
	if err := SavePlot(filepath.Join(t.TempDir(), "x.png"), &Report{}); err == nil {
		t.Fatal("plotted an empty report")
	}
}

func TestValueNamesItsKey(t *testing.T) {
	v := value(42, 7, 64)
	if len(v) != 64 || !strings.HasPrefix(string(v), string(key(42))+":7:") {
		t.Fatalf("value %q", v)
	}
}

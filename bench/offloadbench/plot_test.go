package offloadbench

import (
	"path/filepath"
	"testing"

	"github.com/nearstore/nearstore/bench/internal/plottest"
)

// TestPlots draws both charts of reports shaped as runs leave them, and
// refuses to draw an empty one.
func TestPlots(t *testing.T) {
	dir := t.TempDir()
	adm := &Report{Clients: 2, Seconds: 10, Tokens: 4, Policies: []OffloadPolicy{
		{Policy: "cpu", Jain: 0.98, TargetCPU: [3]float64{0.5, 0.7, 0.9}, Clients: []OffloadClient{{"a", 40, 3}, {"b", 38, 5}}},
		{Policy: "token", Jain: 0.91, TargetCPU: [3]float64{0.4, 0.6, 0.8}, Clients: []OffloadClient{{"a", 30, 9}, {"b", 25, 14}}},
	}}
	plottest.SavePNG(t, SavePlot, adm)

	prep := &PrepReport{HostProcs: 1, Link: "10gbit", Repeat: 3, Modes: []PrepMode{
		{Mode: "host", ImagesPerSec: 50, PrepCPU: PrepCPU{Host: 20}},
		{Mode: "split", ImagesPerSec: 120, PrepCPU: PrepCPU{Host: 8, Target: 10, Peer: 4}, Speedup: 2.4},
	}}
	plottest.SavePNG(t, SavePrepPlot, prep)

	if err := SavePlot(filepath.Join(dir, "empty.png"), &Report{}); err == nil {
		t.Error("an empty admission report plotted")
	}
	if err := SavePrepPlot(filepath.Join(dir, "empty.png"), &PrepReport{}); err == nil {
		t.Error("an empty prep report plotted")
	}
}

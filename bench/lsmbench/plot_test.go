package lsmbench

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSavePlotFormats: svg and pdf are written too, and a name with no
// known format is refused, leaving no file.
func TestSavePlotFormats(t *testing.T) {
	rep := &Report{Records: 10, Ops: 10, Threads: 1, ValueSize: 8, Dist: "uniform", Runs: make([][]Phase, 1)}
	for _, e := range []string{"kv/lsm", "pebble"} {
		rep.Phases = append(rep.Phases,
			Phase{Engine: e, Workload: "load", OpsPerSec: 1000, WriteAmp: 2.5},
			Phase{Engine: e, Workload: "A", OpsPerSec: 2000},
			Phase{Engine: e, Workload: "C", OpsPerSec: 3000})
	}
	dir := t.TempDir()
	for _, name := range []string{"p.svg", "p.pdf"} {
		if err := SavePlot(filepath.Join(dir, name), rep); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	bad := filepath.Join(dir, "p.txt")
	if err := SavePlot(bad, rep); err == nil {
		t.Fatal("p.txt: no error")
	}
	if _, err := os.Stat(bad); err == nil {
		t.Fatal("p.txt: a file was left")
	}
}

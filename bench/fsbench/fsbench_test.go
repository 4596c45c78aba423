package fsbench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nearstore/nearstore/bench/internal/plottest"
)

// TestRun runs the file-system benchmark briefly with the target in
// this process: every case gets runs on both sides with operations
// counted, the metadata operations all have rates, and the report prints,
// encodes and plots. Nothing here is about timing.
func TestRun(t *testing.T) {
	cases := []FSCase{
		{Pattern: "read", BlockSize: 1 << 20, Threads: 2},
		{Pattern: "randwrite", BlockSize: 4 << 10, Threads: 4},
	}
	var stages []string
	rep, err := Run(context.Background(), Config{
		FileSize: 8 << 20, Duration: 100 * time.Millisecond, Repeat: 2, Cases: cases,
		MetaDuration: 50 * time.Millisecond,
		Progress:     func(s string) { stages = append(stages, s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) == 0 {
		t.Error("no progress")
	}
	if rep.Target != "this process" || rep.FileSize != 8<<20 || rep.Extents < 1 || rep.Repeat != 2 {
		t.Errorf("report header %+v", rep)
	}
	if len(rep.Data) != len(cases) {
		t.Fatalf("%d data points, want %d", len(rep.Data), len(cases))
	}
	for i, p := range rep.Data {
		if p.Case != cases[i] || len(p.File.Runs) != 2 || len(p.Raw.Runs) != 2 || p.File.MBps <= 0 || p.Raw.MBps <= 0 || p.Ratio <= 0 {
			t.Errorf("point %d: %+v", i, p)
		}
		for _, r := range append(p.File.Runs, p.Raw.Runs...) {
			if r.Ops <= 0 || r.P50us <= 0 || r.P99us < r.P50us {
				t.Errorf("%s: run %+v", p.Case.Label(), r)
			}
		}
	}
	if rep.Bar.Want != FSBar || rep.Bar.Case == "" || rep.Bar.Met != (rep.Bar.Worst >= FSBar) {
		t.Errorf("bar %+v", rep.Bar)
	}
	if len(rep.Meta) != len(fsMetaOps) {
		t.Fatalf("%d metadata rows, want %d", len(rep.Meta), len(fsMetaOps))
	}
	for i, m := range rep.Meta {
		if m.Op != fsMetaOps[i] || len(m.Runs) != 2 || m.OpsPerSec <= 0 {
			t.Errorf("metadata row %d: %+v", i, m)
		}
	}

	plottest.Table(t, WriteTable, rep, "read 1m QD2", "randwrite 4k QD4", "create+sync", "goal: file data I/O at least 90%")
	var back Report
	if b, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &back); err != nil || len(back.Data) != len(rep.Data) || back.Data[0].Ratio != rep.Data[0].Ratio {
		t.Fatalf("JSON round trip: %v", err)
	}
	plottest.SavePNG(t, SavePlot, rep)
}

// TestParseFSCase: the command line's RW:BS:THREADS.
func TestParseFSCase(t *testing.T) {
	c, err := ParseCase("randread:4k:32")
	if err != nil || c != (FSCase{Pattern: "randread", BlockSize: 4096, Threads: 32}) {
		t.Fatalf("%+v, %v", c, err)
	}
	if c.Label() != "randread 4k QD32" {
		t.Errorf("label %q", c.Label())
	}
	for _, bad := range []string{"", "read:1m", "peek:4k:1", "read:0:1", "read:4k:0", "read:4k:x", "read:4k:1:2"} {
		if _, err := ParseCase(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if got := len(DefaultFSCases()); got != 8 {
		t.Errorf("%d default cases, want 8", got)
	}
}

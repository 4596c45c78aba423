package isolationbench

import "testing"

// TestSummarize: medians per phase, the ratio, and the bars' verdicts.
func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name          string
		runs          []PhaseRun
		ratio, p99ms  float64
		iopsMet, p99M bool
	}{
		{
			name: "met",
			runs: []PhaseRun{
				{Phase: PhaseIdle, IOPS: 1000, P99us: 300, Secs: 1}, {Phase: PhaseLoaded, IOPS: 600, P99us: 1500, Secs: 1},
				{Phase: PhaseIdle, IOPS: 900, P99us: 200, Secs: 1}, {Phase: PhaseLoaded, IOPS: 700, P99us: 1900, Secs: 1},
				{Phase: PhaseIdle, IOPS: 1100, P99us: 250, Secs: 1}, {Phase: PhaseLoaded, IOPS: 500, P99us: 900, Secs: 1},
			},
			ratio: 0.6, p99ms: 1.5, iopsMet: true, p99M: true,
		},
		{
			name: "missed",
			runs: []PhaseRun{
				{Phase: PhaseIdle, IOPS: 1000, P99us: 300, Secs: 1}, {Phase: PhaseLoaded, IOPS: 10, P99us: 1e6, Secs: 1},
			},
			ratio: 0.01, p99ms: 1000,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{Runs: tc.runs}
			r.summarize()
			if r.Ratio != tc.ratio || r.Loaded.P99us/1e3 != tc.p99ms {
				t.Fatalf("ratio %v, loaded p99 %v ms; want %v, %v", r.Ratio, r.Loaded.P99us/1e3, tc.ratio, tc.p99ms)
			}
			if len(r.Bars) != 2 || r.Bars[0].Met != tc.iopsMet || r.Bars[1].Met != tc.p99M {
				t.Fatalf("bars %+v", r.Bars)
			}
		})
	}
}

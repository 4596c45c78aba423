package blockio

import (
	"context"
	"testing"
	"time"

	"github.com/nearstore/nearstore/bench/report"
)

// TestPingPong runs the floor for real on loopback, at queue depth 1 and
// with several exchanges in flight on two connections.
func TestPingPong(t *testing.T) {
	p := &PingPong{}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, cfg := range []Config{
		{Pattern: "randread", BlockSize: 4096, QueueDepth: 1, Queues: 1, Duration: 200 * time.Millisecond},
		{Pattern: "randread", BlockSize: 8192, QueueDepth: 4, Queues: 2, Duration: 200 * time.Millisecond},
	} {
		res, err := p.Run(context.Background(), cfg)
		if err != nil {
			t.Fatalf("QD%d: %v", cfg.QueueDepth, err)
		}
		if res.System != "pingpong" || res.Ops <= 0 || res.IOPS <= 0 || res.P50us <= 0 || res.P99us < res.P50us {
			t.Errorf("QD%d: result %+v", cfg.QueueDepth, res)
		}
		if res.QueueDepth != cfg.QueueDepth || res.Queues != cfg.Queues || res.BlockSize != cfg.BlockSize {
			t.Errorf("QD%d: result describes %+v", cfg.QueueDepth, res)
		}
	}
	if _, err := p.Run(context.Background(), Config{BlockSize: 4096, Queues: 1, Duration: time.Second}); err == nil {
		t.Error("queue depth 0 accepted")
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := p.Run(context.Background(), Config{BlockSize: 4096, QueueDepth: 1, Queues: 1, Duration: time.Second}); err == nil {
		t.Error("Run after Close succeeded")
	}
}

// TestPingPongCancel stops a run when its context ends.
func TestPingPongCancel(t *testing.T) {
	p := &PingPong{}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := p.Run(ctx, Config{BlockSize: 4096, QueueDepth: 1, Queues: 1, Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("cancelled run took %v", d)
	}
}

func TestBars(t *testing.T) {
	row := func(qd int, pattern string, ns, nbd Result) ComparisonRow {
		return ComparisonRow{
			Point:  Point{Pattern: pattern, BlockSize: 4096, QueueDepth: qd, Queues: 1},
			Runs:   map[string][]Result{"nearstore": {ns}, "nbdkit": {nbd}},
			Median: map[string]Result{"nearstore": ns, "nbdkit": nbd},
		}
	}
	cases := []struct {
		name string
		rows []ComparisonRow
		want []report.Bar
	}{
		{"all met", []ComparisonRow{
			row(1, "randread", Result{IOPS: 30000, P50us: 30}, Result{IOPS: 12000, P50us: 60}),
			row(32, "randread", Result{IOPS: 200000}, Result{IOPS: 80000}),
		}, []report.Bar{
			{What: "QD1 4 KiB randread: nearstore p50 µs", Want: "<= 40", Got: 30, Met: true},
			{What: "QD1 4 KiB randread: nearstore / nbdkit IOPS", Want: ">= 1.5", Got: 2.5, Met: true},
			{What: "QD32 4 KiB randread: nearstore / nbdkit IOPS", Want: ">= 2", Got: 2.5, Met: true},
		}},
		{"missed", []ComparisonRow{
			row(1, "randread", Result{IOPS: 12000, P50us: 80}, Result{IOPS: 12000, P50us: 60}),
			row(32, "randread", Result{IOPS: 100000}, Result{IOPS: 80000}),
		}, []report.Bar{
			{What: "QD1 4 KiB randread: nearstore p50 µs", Want: "<= 40", Got: 80, Met: false},
			{What: "QD1 4 KiB randread: nearstore / nbdkit IOPS", Want: ">= 1.5", Got: 1, Met: false},
			{What: "QD32 4 KiB randread: nearstore / nbdkit IOPS", Want: ">= 2", Got: 1.25, Met: false},
		}},
		{"writes have no bars", []ComparisonRow{
			row(1, "randwrite", Result{IOPS: 30000, P50us: 30}, Result{IOPS: 12000}),
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Bars(&Comparison{Rows: tc.rows})
			if len(got) != len(tc.want) {
				t.Fatalf("bars %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("bar %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
	// Without the baseline only the latency bar can be judged.
	r := row(1, "randread", Result{IOPS: 30000, P50us: 30}, Result{})
	delete(r.Median, "nbdkit")
	delete(r.Runs, "nbdkit")
	if got := Bars(&Comparison{Rows: []ComparisonRow{r}}); len(got) != 1 || !got[0].Met {
		t.Errorf("bars without a baseline: %+v", got)
	}
}

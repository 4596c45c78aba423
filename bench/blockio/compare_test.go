package blockio

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

// serveEnv makes the test binary act as `nearstore target serve`, so that
// Nearstore can start it as its target process.
const serveEnv = "NEARSTORE_BENCH_TEST_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		if err := serveForTest(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveForTest implements the part of `target serve` Nearstore uses (the
// flags harness.StartTarget passes, and --poll-spin).
func serveForTest(args []string) error {
	if len(args) < 2 || args[0] != "target" || args[1] != "serve" {
		return fmt.Errorf("want target serve, got %q", args)
	}
	fs := flag.NewFlagSet("target serve", flag.ContinueOnError)
	fs.String("log-level", "", "")
	fs.Bool("allow-any-host", false, "")
	listen, nqn, spec := fs.String("listen", "", ""), fs.String("nqn", "", ""), fs.String("volume", "", "")
	spin := fs.Duration("poll-spin", 0, "")
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	vol, err := volume.Open(*spec)
	if err != nil {
		return err
	}
	defer vol.Close()
	srv, err := target.New(target.Config{Subsystems: []target.SubsystemConfig{{
		NQN: *nqn, Namespaces: []target.NamespaceConfig{{Backend: vol, Name: vol.String()}},
	}}, PollSpin: *spin})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, 5, 1, 9, 100}, 5},
	} {
		in := append([]float64(nil), tc.in...)
		if got := report.Median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Errorf("median reordered its input: %v", tc.in)
			}
		}
	}
}

func TestMedianResult(t *testing.T) {
	rs := []Result{
		{System: "x", Pattern: "randread", QueueDepth: 32, IOPS: 100, MBps: 1, P50us: 30, P99us: 90, P999us: 200, Ops: 10, Seconds: 1},
		{System: "x", Pattern: "randread", QueueDepth: 32, IOPS: 300, MBps: 3, P50us: 10, P99us: 70, P999us: 100, Ops: 30, Seconds: 1},
		{System: "x", Pattern: "randread", QueueDepth: 32, IOPS: 200, MBps: 2, P50us: 20, P99us: 80, P999us: 900, Ops: 20, Seconds: 1, Errors: 1},
	}
	m := MedianResult(rs)
	if m.IOPS != 200 || m.MBps != 2 || m.P50us != 20 || m.P99us != 80 || m.P999us != 200 {
		t.Errorf("medians %+v", m)
	}
	if m.Ops != 60 || m.Seconds != 3 || m.Errors != 1 || m.System != "x" || m.QueueDepth != 32 {
		t.Errorf("totals and labels %+v", m)
	}
	if (MedianResult(nil) != Result{}) {
		t.Error("MedianResult(nil) is not zero")
	}
}

func TestParsePoint(t *testing.T) {
	for _, p := range DefaultPoints() {
		q, err := ParsePoint(p.String())
		if err != nil || q != p {
			t.Errorf("ParsePoint(%q) = %v, %v", p.String(), q, err)
		}
	}
	if len(DefaultPoints()) != 8 {
		t.Errorf("default matrix has %d points, want 8", len(DefaultPoints()))
	}
	p, err := ParsePoint("write:8:1:128k")
	if err != nil || p != (Point{Pattern: "write", BlockSize: 128 << 10, QueueDepth: 8, Queues: 1}) {
		t.Errorf("ParsePoint(write:8:1:128k) = %v, %v", p, err)
	}
	for _, bad := range []string{"", "randread", "randread:32", "trim:1:1", "randread:0:1", "randread:1:x", "randread:1:1:3", "randread:1:1:4k:9"} {
		if _, err := ParsePoint(bad); err == nil {
			t.Errorf("ParsePoint(%q) succeeded", bad)
		}
	}
}

// fakeSystem answers every run with IOPS from a script and records the
// order of runs.
type fakeSystem struct {
	name    string
	iops    []float64
	runs    *[]string
	started bool
	closed  int
	failAt  int // run number (1-based) that fails; 0: none
}

func (f *fakeSystem) Name() string                    { return f.name }
func (f *fakeSystem) Version(context.Context) string  { return f.name + " 1.0" }
func (f *fakeSystem) Start(ctx context.Context) error { f.started = true; return nil }
func (f *fakeSystem) Close() error                    { f.closed++; return nil }

func (f *fakeSystem) Run(_ context.Context, cfg Config) (Result, error) {
	*f.runs = append(*f.runs, f.name)
	n := len(*f.runs)
	if f.failAt != 0 && n >= f.failAt {
		return Result{}, errors.New("boom")
	}
	if cfg.Progress != nil {
		cfg.Progress(cfg.Duration, -1)
	}
	v := f.iops[0]
	f.iops = append(f.iops[1:], v)
	return Result{System: f.name, Pattern: cfg.Pattern, QueueDepth: cfg.QueueDepth, Queues: cfg.Queues, BlockSize: cfg.BlockSize,
		IOPS: v, Ops: int64(v), Seconds: 1, P50us: 1e6 / v, P99us: 2e6 / v}, nil
}

func TestCompare(t *testing.T) {
	var runs []string
	a := &fakeSystem{name: "a", iops: []float64{100, 300, 200}, runs: &runs}
	b := &fakeSystem{name: "b", iops: []float64{50, 50, 400}, runs: &runs}
	var labels []string
	c, err := Compare(context.Background(), CompareConfig{
		Systems: []System{a, b}, Points: DefaultPoints()[:2], Repeat: 3, Duration: time.Second,
		Progress: func(label string, _ time.Duration) (func(time.Duration, int64), func()) {
			labels = append(labels, label)
			return func(time.Duration, int64) {}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("a b ", 6); strings.Join(runs, " ")+" " != want {
		t.Errorf("run order %v, want alternating", runs)
	}
	if len(labels) != 12 || !strings.Contains(labels[0], "randread 4k QD1 ×1 #1") {
		t.Errorf("progress labels %q", labels)
	}
	if !a.started || !b.started || a.closed == 0 || b.closed == 0 {
		t.Errorf("systems not started and stopped: %+v %+v", a, b)
	}
	if len(c.Rows) != 2 || len(c.Rows[0].Runs["a"]) != 3 {
		t.Fatalf("rows %+v", c.Rows)
	}
	r := c.Rows[0]
	if r.Median["a"].IOPS != 200 || r.Median["b"].IOPS != 50 || r.Ratio != 4 {
		t.Errorf("medians a %v b %v ratio %v, want 200 50 4", r.Median["a"].IOPS, r.Median["b"].IOPS, r.Ratio)
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "4.00×") || !strings.Contains(buf.String(), "a IOPS") {
		t.Errorf("table:\n%s", buf.String())
	}
	buf.Reset()
	if err := WriteMarkdown(&buf, c); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 4 || !strings.Contains(lines[2], "**4.00×**") {
		t.Errorf("markdown:\n%s", buf.String())
	}
}

func TestCompareFailure(t *testing.T) {
	var runs []string
	a := &fakeSystem{name: "a", iops: []float64{100}, runs: &runs}
	b := &fakeSystem{name: "b", iops: []float64{50}, runs: &runs, failAt: 4}
	c, err := Compare(context.Background(), CompareConfig{Systems: []System{a, b}, Points: DefaultPoints(), Repeat: 3, Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err %v", err)
	}
	if c == nil || len(c.Rows) != 1 || len(c.Rows[0].Runs["a"]) != 2 {
		t.Errorf("partial result %+v", c)
	}
	if a.closed == 0 || b.closed == 0 {
		t.Error("systems not stopped after a failure")
	}

	// The second system failed its first run: its cells are blank.
	runs = nil
	b = &fakeSystem{name: "b", iops: []float64{50}, runs: &runs, failAt: 2}
	c, _ = Compare(context.Background(), CompareConfig{Systems: []System{a, b}, Points: DefaultPoints(), Repeat: 3, Duration: time.Second})
	var buf bytes.Buffer
	if err := WriteTable(&buf, c); err != nil {
		t.Fatal(err)
	}
	if strings.Count(buf.String(), "—") != 3 {
		t.Errorf("partial table:\n%s", buf.String())
	}
}

// TestNearstoreSystem runs the real nearstore side: the target as a child
// process (this test binary, acting as `target serve`), filled, then
// driven through the host library.
func TestNearstoreSystem(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	t.Setenv(serveEnv, "1")
	n := &Nearstore{Exe: exe, Size: 8 << 20}
	ctx := context.Background()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctrl, ns, err := n.connect(ctx, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	// The fill wrote random bytes: the last block is not zero any more.
	blk := make([]byte, 4096)
	if _, err := ns.ReadAt(blk, ns.Size()-4096); err != nil {
		t.Fatal(err)
	}
	ctrl.Close()
	if bytes.Equal(blk, make([]byte, 4096)) {
		t.Error("the volume was not filled")
	}
	r, err := n.Run(ctx, Config{Pattern: "randwrite", BlockSize: 4096, QueueDepth: 4, Queues: 2, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.System != "nearstore" || r.Ops == 0 || r.Queues != 2 {
		t.Errorf("result %+v", r)
	}
	proc := n.proc
	if err := n.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-proc.Done():
	default:
		t.Error("target still running after Close")
	}
}

// BenchmarkLoopbackRead4K measures nearstore's data path with target and
// host in one process, for profiling both sides at once:
//
//	go test ./bench -run '^$' -bench LoopbackRead4K -benchtime 200000x -cpuprofile cpu.out
//
// Each of b.N operations is one 4 KiB random read, with 32 in flight on
// one queue.
func BenchmarkLoopbackRead4K(b *testing.B) {
	for _, qd := range []int{1, 32} {
		b.Run(fmt.Sprintf("qd%d", qd), func(b *testing.B) { benchLoopback(b, "randread", qd) })
	}
}

// BenchmarkLoopbackWrite4K is BenchmarkLoopbackRead4K for writes.
func BenchmarkLoopbackWrite4K(b *testing.B) {
	for _, qd := range []int{1, 32} {
		b.Run(fmt.Sprintf("qd%d", qd), func(b *testing.B) { benchLoopback(b, "randwrite", qd) })
	}
}

func benchLoopback(b *testing.B, pattern string, qd int) {
	const nqn = "nqn.2026-11.io.nearstore:loopback"
	const size = 64 << 20
	vol, err := volume.Open(fmt.Sprintf("mem:%d", size))
	if err != nil {
		b.Fatal(err)
	}
	defer vol.Close()
	srv, err := target.New(target.Config{Subsystems: []target.SubsystemConfig{{NQN: nqn, Namespaces: []target.NamespaceConfig{{Backend: vol, Name: "mem"}}}}})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	ctx := context.Background()
	ctrl, err := host.Connect(ctx, ln.Addr().String(), nqn, host.Options{IOQueues: 1, QueueDepth: qd})
	if err != nil {
		b.Fatal(err)
	}
	defer ctrl.Close()
	ns, err := ctrl.Namespace(1)
	if err != nil {
		b.Fatal(err)
	}
	fill := make([]byte, 4<<20)
	for off := int64(0); off < size; off += int64(len(fill)) {
		if _, err := ns.WriteAt(fill, off); err != nil {
			b.Fatal(err)
		}
	}
	q := ns.Queue(0)
	done := make(chan *host.Call, qd)
	blocks := uint64(size / 4096)
	lba := uint64(1)
	next := func() uint64 { lba = lba*6364136223846793005 + 1442695040888963407; return (lba >> 20) % blocks * 8 }
	submit := func(buf []byte) {
		if pattern == "randwrite" {
			q.WriteBlocks(ctx, buf, next(), done)
		} else {
			q.ReadBlocks(ctx, buf, next(), done)
		}
	}
	b.SetBytes(4096)
	cpu0, _ := harness.ProcessCPU()
	b.ResetTimer()
	defer func() {
		// Both ends' CPU per operation, the figure a loaded machine
		// disturbs least.
		cpu1, _ := harness.ProcessCPU()
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	}()
	inflight := 0
	for i := 0; i < min(qd, b.N); i++ {
		submit(make([]byte, 4096))
		inflight++
	}
	for submitted := inflight; inflight > 0; {
		c := <-done
		inflight--
		if c.Err != nil {
			b.Fatal(c.Err)
		}
		if submitted < b.N {
			buf := c.In
			if pattern == "randwrite" {
				buf = c.Out
			}
			submit(buf)
			submitted++
			inflight++
		}
	}
}

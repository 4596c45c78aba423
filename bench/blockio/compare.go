package blockio

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/volume"
)

// System is one side of a comparison: something that serves a block
// device and can be driven with a Config.
type System interface {
	// Name labels the system in results ("nearstore", "nbdkit").
	Name() string
	// Version describes the software measured.
	Version(ctx context.Context) string
	// Start brings the system up and prepares the device (see the
	// implementations for how it is filled).
	Start(ctx context.Context) error
	// Run runs one workload. cfg.Progress, if set, may be called with ops
	// -1 when the system cannot report completed operations live.
	Run(ctx context.Context, cfg Config) (Result, error)
	// Close stops the system and everything it started.
	Close() error
}

// Nearstore is the subject of a comparison: `nearstore target serve` on a
// memory volume as a separate process on a free loopback port, driven by
// Run through the host library in this process, one TCP connection
// per queue. Set the fields, then Start; Close stops the target.
type Nearstore struct {
	// Exe is the nearstore binary that runs the target (os.Executable()
	// when the caller is nearstore).
	Exe string
	// Size is the memory volume's size in bytes.
	Size int64
	// ServerCPUs pins the target with taskset (empty: not pinned).
	ServerCPUs string
	// Logger receives the host library's connection events (default:
	// discarded).
	Logger *slog.Logger
	// PollSpin is both ends' polling bound (target.Config.PollSpin,
	// host.Options.PollSpin): 0 their default, negative none.
	PollSpin time.Duration

	proc *proc.Process
	addr string
}

// nearstoreNQN is the subsystem the benchmark target serves.
const nearstoreNQN = "nqn.2026-11.io.nearstore:bench"

// Name returns "nearstore".
func (n *Nearstore) Name() string { return "nearstore" }

// Version returns the Go toolchain nearstore was built with.
func (n *Nearstore) Version(context.Context) string {
	return "nearstore (" + runtime.Version() + ")"
}

// Addr returns the target's address once started.
func (n *Nearstore) Addr() string { return n.addr }

// Pid returns the target process's ID once started (for profilers).
func (n *Nearstore) Pid() int {
	if n.proc == nil {
		return 0
	}
	return n.proc.Pid()
}

// Start starts the target process, waits until it accepts connections,
// and writes the whole volume once, sequentially, so that reads find
// allocated memory.
func (n *Nearstore) Start(ctx context.Context) error {
	if n.Exe == "" {
		return errors.New("bench: nearstore: no executable to run the target")
	}
	var err error
	if n.proc, n.addr, err = harness.StartTarget(ctx, harness.TargetSpec{Exe: n.Exe, NQN: nearstoreNQN,
		Volume: "mem:" + strconv.FormatInt(n.Size, 10), Args: []string{"--poll-spin", n.PollSpin.String()}, CPUs: n.ServerCPUs}); err != nil {
		return err
	}
	return n.fill(ctx)
}

func (n *Nearstore) connect(ctx context.Context, queues, depth int) (*host.Controller, *host.Namespace, error) {
	ctrl, err := host.Connect(ctx, n.addr, nearstoreNQN, harness.HostOptions(host.Options{IOQueues: queues, QueueDepth: depth, Logger: n.Logger, PollSpin: n.PollSpin}))
	if err != nil {
		return nil, nil, fmt.Errorf("bench: nearstore: %w", err)
	}
	if got := ctrl.IOQueues(); got != queues {
		ctrl.Close()
		return nil, nil, fmt.Errorf("bench: nearstore: asked for %d I/O queues, got %d", queues, got)
	}
	ns, err := ctrl.Namespace(1)
	if err != nil {
		ctrl.Close()
		return nil, nil, fmt.Errorf("bench: nearstore: %w", err)
	}
	return ctrl, ns, nil
}

// fill writes random bytes over the whole volume in 8 MiB steps (which the
// host library splits into concurrent commands of its maximum transfer).
func (n *Nearstore) fill(ctx context.Context) error {
	ctrl, ns, err := n.connect(ctx, 1, 32)
	if err != nil {
		return err
	}
	defer ctrl.Close()
	buf := make([]byte, min(8<<20, ns.Size()))
	_, _ = rand.Read(buf)
	for off := int64(0); off < ns.Size(); off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), ns.Size()-off)]
		if _, err := ns.WriteAtContext(ctx, b, off); err != nil {
			return fmt.Errorf("bench: nearstore: filling the volume: %w", err)
		}
	}
	return nil
}

// Run connects with cfg.Queues I/O queues of depth cfg.QueueDepth, runs
// Run, and disconnects.
func (n *Nearstore) Run(ctx context.Context, cfg Config) (Result, error) {
	if n.proc == nil {
		return Result{}, errors.New("bench: nearstore target not started")
	}
	ctrl, ns, err := n.connect(ctx, cfg.Queues, cfg.QueueDepth)
	if err != nil {
		return Result{}, err
	}
	defer ctrl.Close()
	cpu := startCPU(n.proc.Pid())
	res, err := Run(ctx, ns, cfg)
	cpu.stop(&res)
	res.System = n.Name()
	if err != nil {
		select {
		case <-n.proc.Done():
			return res, fmt.Errorf("bench: nearstore target died: %w", n.proc.Wait())
		default:
		}
	}
	return res, err
}

// Close stops the target.
func (n *Nearstore) Close() error {
	if n.proc == nil {
		return nil
	}
	err := n.proc.Stop()
	n.proc = nil
	return err
}

// cpuMeter measures a run's CPU time per operation: this process's, and a
// server process's when it has one.
type cpuMeter struct {
	pid          string
	self, server time.Duration
}

// startCPU starts measuring; pid 0 is no server process.
func startCPU(pid int) cpuMeter {
	m := cpuMeter{}
	m.self, _ = harness.ProcessCPU()
	if pid > 0 {
		m.pid = strconv.Itoa(pid)
		m.server, _ = harness.ProcCPU(m.pid)
	}
	return m
}

// stop sets res's CPU per operation from the time used since startCPU.
func (m cpuMeter) stop(res *Result) {
	if res.Ops <= 0 {
		return
	}
	perOp := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(res.Ops) }
	if self, ok := harness.ProcessCPU(); ok {
		res.ClientCPUus = perOp(self - m.self)
	}
	if m.pid != "" {
		if srv, err := harness.ProcCPU(m.pid); err == nil {
			res.ServerCPUus = perOp(srv - m.server)
		}
	}
}

// Point is one configuration of a block I/O comparison.
type Point struct {
	Pattern    string `json:"rw"`
	BlockSize  int    `json:"bs"`
	QueueDepth int    `json:"qd"`
	Queues     int    `json:"queues"`
}

// String formats p as ParsePoint reads it: "randread:32:2:4k".
func (p Point) String() string {
	return fmt.Sprintf("%s:%d:%d:%s", p.Pattern, p.QueueDepth, p.Queues, sizeLabel(p.BlockSize))
}

// Label is a short human label: "randread QD32 ×2".
func (p Point) Label() string {
	return fmt.Sprintf("%s %s QD%d ×%d", p.Pattern, sizeLabel(p.BlockSize), p.QueueDepth, p.Queues)
}

func sizeLabel(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return strconv.Itoa(n/1024) + "k"
	}
	return strconv.Itoa(n)
}

// ParsePoint reads "RW:QD:QUEUES[:BS]", e.g. "randread:32:2" or
// "write:8:1:128k"; the block size defaults to 4 KiB.
func ParsePoint(s string) (Point, error) {
	f := strings.Split(s, ":")
	if len(f) < 3 || len(f) > 4 {
		return Point{}, fmt.Errorf("bench: config %q: want RW:QD:QUEUES[:BS], e.g. randread:32:2", s)
	}
	p := Point{Pattern: f[0], BlockSize: 4096}
	switch p.Pattern {
	case "randread", "randwrite", "read", "write":
	default:
		return Point{}, fmt.Errorf("bench: config %q: pattern %q: want randread, randwrite, read or write", s, f[0])
	}
	var err error
	if p.QueueDepth, err = strconv.Atoi(f[1]); err != nil || p.QueueDepth < 1 {
		return Point{}, fmt.Errorf("bench: config %q: bad queue depth %q", s, f[1])
	}
	if p.Queues, err = strconv.Atoi(f[2]); err != nil || p.Queues < 1 {
		return Point{}, fmt.Errorf("bench: config %q: bad queue count %q", s, f[2])
	}
	if len(f) == 4 {
		bs, err := volume.ParseSize(f[3])
		if err != nil || bs < 512 || bs > 1<<20 {
			return Point{}, fmt.Errorf("bench: config %q: bad block size %q", s, f[3])
		}
		p.BlockSize = int(bs)
	}
	return p, nil
}

// DefaultPoints is the matrix: 4 KiB random read and random write
// at queue depth 1 and 32, on one and two queues.
func DefaultPoints() []Point {
	var ps []Point
	for _, rw := range []string{"randread", "randwrite"} {
		for _, qd := range []int{1, 32} {
			for _, q := range []int{1, 2} {
				ps = append(ps, Point{Pattern: rw, BlockSize: 4096, QueueDepth: qd, Queues: q})
			}
		}
	}
	return ps
}

// CompareConfig configures Compare.
type CompareConfig struct {
	// Systems are compared in this order; ratios are of the first's IOPS
	// to the second's.
	Systems []System
	// Points are the configurations measured.
	Points []Point
	// Repeat is how many times each system runs each point; the runs
	// alternate between systems (A B A B …). Default 3.
	Repeat int
	// Duration is the length of each run.
	Duration time.Duration
	// Region bounds the bytes touched from the start of the device
	// (default: all of it).
	Region int64
	// Progress, when set, is called before each run with its label and
	// returns the run's live progress callback (see Config; ops may
	// be -1) and a function called when the run ends. Either may be nil.
	Progress func(label string, d time.Duration) (update func(time.Duration, int64), end func())
	// Started, when set, is called once every system has started.
	Started func()
}

// Comparison is the outcome of Compare.
type Comparison struct {
	Machine  report.Machine  `json:"machine"`
	Systems  []string        `json:"systems"`
	Versions []string        `json:"versions"`
	Repeat   int             `json:"repeat"`
	Duration float64         `json:"duration_s"`
	Rows     []ComparisonRow `json:"rows"`
	// Bars are issue 25's bars for the points measured (see Bars).
	Bars []report.Bar `json:"bars"`
}

// ComparisonRow holds one point's runs and their medians, by system name.
type ComparisonRow struct {
	Point  Point               `json:"config"`
	Runs   map[string][]Result `json:"runs"`
	Median map[string]Result   `json:"median"`
	// Ratio is the first system's median IOPS over the second's (0 with
	// one system).
	Ratio float64 `json:"ratio,omitempty"`
}

// Compare starts every system, runs every point Repeat times on each,
// alternating systems, and returns all runs with their medians. It stops
// the systems before returning. On error it returns what it measured so
// far along with the error.
func Compare(ctx context.Context, cfg CompareConfig) (*Comparison, error) {
	if len(cfg.Systems) == 0 || len(cfg.Points) == 0 {
		return nil, errors.New("bench: nothing to compare")
	}
	if cfg.Repeat <= 0 {
		cfg.Repeat = 3
	}
	if cfg.Duration <= 0 {
		return nil, errors.New("bench: duration must be positive")
	}
	c := &Comparison{Machine: report.DescribeMachine(), Repeat: cfg.Repeat, Duration: cfg.Duration.Seconds()}
	for _, s := range cfg.Systems {
		c.Systems = append(c.Systems, s.Name())
		c.Versions = append(c.Versions, s.Version(ctx))
	}
	started := 0
	defer func() {
		for _, s := range cfg.Systems[:started] {
			_ = s.Close()
		}
	}()
	for _, s := range cfg.Systems {
		if err := s.Start(ctx); err != nil {
			_ = s.Close()
			return c, fmt.Errorf("bench: starting %s: %w", s.Name(), err)
		}
		started++
	}
	if cfg.Started != nil {
		cfg.Started()
	}
	for _, p := range cfg.Points {
		row := ComparisonRow{Point: p, Runs: map[string][]Result{}, Median: map[string]Result{}}
		c.Rows = append(c.Rows, row)
		for rep := 1; rep <= cfg.Repeat; rep++ {
			for _, s := range cfg.Systems {
				bc := Config{
					Pattern: p.Pattern, BlockSize: p.BlockSize, QueueDepth: p.QueueDepth, Queues: p.Queues,
					Duration: cfg.Duration, Region: cfg.Region,
				}
				var end func()
				if cfg.Progress != nil {
					bc.Progress, end = cfg.Progress(fmt.Sprintf("%-9s %s #%d", s.Name(), p.Label(), rep), cfg.Duration)
				}
				r, err := s.Run(ctx, bc)
				if end != nil {
					end()
				}
				if err != nil {
					return c, fmt.Errorf("bench: %s, %s, run %d: %w", s.Name(), p.Label(), rep, err)
				}
				row.Runs[s.Name()] = append(row.Runs[s.Name()], r)
				row.Median[s.Name()] = MedianResult(row.Runs[s.Name()])
				if len(c.Systems) > 1 {
					a, b := row.Median[c.Systems[0]], row.Median[c.Systems[1]]
					row.Ratio = 0
					if a.Ops > 0 && b.IOPS > 0 {
						row.Ratio = a.IOPS / b.IOPS
					}
				}
				c.Rows[len(c.Rows)-1] = row
			}
		}
	}
	// Stop the systems now, so that a failure to stop is reported.
	var errs []error
	for _, s := range cfg.Systems {
		if err := s.Close(); err != nil {
			errs = append(errs, fmt.Errorf("bench: stopping %s: %w", s.Name(), err))
		}
	}
	started = 0
	c.Bars = Bars(c)
	return c, errors.Join(errs...)
}

// MedianResult summarizes repeated runs of one configuration: IOPS, MB/s
// and each latency percentile are the medians of the runs' values (taken
// separately); Seconds, Ops and Errors are totals.
func MedianResult(rs []Result) Result {
	if len(rs) == 0 {
		return Result{}
	}
	pick := func(f func(Result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return report.Median(xs)
	}
	m := rs[0]
	m.Seconds, m.Ops, m.Errors = 0, 0, 0
	for _, r := range rs {
		m.Seconds += r.Seconds
		m.Ops += r.Ops
		m.Errors += r.Errors
	}
	m.IOPS = pick(func(r Result) float64 { return r.IOPS })
	m.MBps = pick(func(r Result) float64 { return r.MBps })
	m.P50us = pick(func(r Result) float64 { return r.P50us })
	m.P99us = pick(func(r Result) float64 { return r.P99us })
	m.P999us = pick(func(r Result) float64 { return r.P999us })
	m.ClientCPUus = pick(func(r Result) float64 { return r.ClientCPUus })
	m.ServerCPUus = pick(func(r Result) float64 { return r.ServerCPUus })
	return m
}

// Bar thresholds (issue 25): at queue depth 1, a 4 KiB random read's
// median latency and its IOPS against the baseline's; at queue depth 32,
// IOPS against the baseline's.
const (
	barQD1P50us    = 40
	barQD1Ratio    = 1.5
	barQD32Ratio   = 2.0
	barSubject     = "nearstore"
	barBaseline    = "nbdkit"
	barBarePattern = "randread"
)

// Bars returns the bars the comparison's points measure: for 4 KiB
// random reads on one queue, at queue depth 1 nearstore's median p50 and
// its IOPS over nbdkit's, at queue depth 32 its IOPS over nbdkit's. A bar
// whose systems did not both run is left out.
func Bars(c *Comparison) []report.Bar {
	var bars []report.Bar
	for _, r := range c.Rows {
		p := r.Point
		if p.Pattern != barBarePattern || p.BlockSize != 4096 || p.Queues != 1 {
			continue
		}
		subj, ok := r.Median[barSubject]
		if !ok || len(r.Runs[barSubject]) == 0 {
			continue
		}
		base, hasBase := r.Median[barBaseline]
		ratio := 0.0
		if hasBase && base.IOPS > 0 {
			ratio = subj.IOPS / base.IOPS
		}
		switch p.QueueDepth {
		case 1:
			bars = append(bars, report.Bar{What: "QD1 4 KiB randread: nearstore p50 µs", Want: fmt.Sprintf("<= %d", barQD1P50us),
				Got: subj.P50us, Met: subj.P50us <= barQD1P50us})
			if hasBase {
				bars = append(bars, report.Bar{What: "QD1 4 KiB randread: nearstore / nbdkit IOPS", Want: fmt.Sprintf(">= %g", barQD1Ratio),
					Got: ratio, Met: ratio >= barQD1Ratio})
			}
		case 32:
			if hasBase {
				bars = append(bars, report.Bar{What: "QD32 4 KiB randread: nearstore / nbdkit IOPS", Want: fmt.Sprintf(">= %g", barQD32Ratio),
					Got: ratio, Met: ratio >= barQD32Ratio})
			}
		}
	}
	return bars
}

// WriteTable prints one line per point: each system's median IOPS, the
// ratio of the first two, and each system's median p50/p99 latency.
func WriteTable(w io.Writer, c *Comparison) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(headerCells(c, "p50/p99 µs"), "\t")+"\t")
	for _, r := range c.Rows {
		fmt.Fprintln(tw, strings.Join(rowCells(c, r), "\t")+"\t")
	}
	return tw.Flush()
}

// WriteMarkdown prints the table of WriteTable as a Markdown table.
func WriteMarkdown(w io.Writer, c *Comparison) error {
	hdr := headerCells(c, "p50 / p99 µs")
	align := make([]string, len(hdr))
	for i := range align {
		align[i] = "---:"
	}
	align[0] = "---"
	lines := []string{"| " + strings.Join(hdr, " | ") + " |", "| " + strings.Join(align, " | ") + " |"}
	for _, r := range c.Rows {
		cells := rowCells(c, r)
		if len(c.Systems) > 1 {
			cells[len(c.Systems)+1] = "**" + cells[len(c.Systems)+1] + "**"
		}
		lines = append(lines, "| "+strings.Join(cells, " | ")+" |")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n")+"\n")
	return err
}

// headerCells are the column heads of the cells rowCells gives: the
// point, each system's IOPS, their ratio when there are two or more
// systems, and each system's latencies under the label lat.
func headerCells(c *Comparison, lat string) []string {
	hdr := []string{"config"}
	for _, s := range c.Systems {
		hdr = append(hdr, s+" IOPS")
	}
	if len(c.Systems) > 1 {
		hdr = append(hdr, "ratio")
	}
	for _, s := range c.Systems {
		hdr = append(hdr, s+" "+lat)
	}
	return hdr
}

func rowCells(c *Comparison, r ComparisonRow) []string {
	// A system without runs (the comparison stopped early) shows "—".
	cells := []string{r.Point.Label()}
	for _, s := range c.Systems {
		cell := "—"
		if len(r.Runs[s]) > 0 {
			cell = fmt.Sprintf("%.0f", r.Median[s].IOPS)
		}
		cells = append(cells, cell)
	}
	if len(c.Systems) > 1 {
		cell := "—"
		if r.Ratio > 0 {
			cell = fmt.Sprintf("%.2f×", r.Ratio)
		}
		cells = append(cells, cell)
	}
	for _, s := range c.Systems {
		cell := "—"
		if m := r.Median[s]; len(r.Runs[s]) > 0 {
			cell = fmt.Sprintf("%.0f / %.0f", m.P50us, m.P99us)
		}
		cells = append(cells, cell)
	}
	return cells
}

// Package chainbench is the replication experiment (bench chain): a chain
// of R nodes, each a separate "nearstore cluster node" process with a
// kv/lsm store, under a read-heavy workload (YCSB B: 95% reads, 5%
// updates, Zipf-distributed keys), read two ways in the same run,
// interleaved: CRRS (each read at a random replica, at the tail only if
// that replica's copy is dirty) and tail-only (plain chain replication).
//
// What bounds a replica's reads on real hardware is its device; the
// nodes model one with --read-iops (each node admits at most that many
// store reads per second, as volume's simulated SSDs admit commands), so
// the run measures what the routing buys when the device is the bound,
// as in LEED. With ReadIOPS 0 the nodes are unthrottled and share this
// machine's cores with the client: then the figure shows CPU contention,
// not replica capacity.
package chainbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
)

// Bar is the bar: CRRS read-heavy throughput at least this many
// times tail-only's.
const Bar = 1.5

// Config is one run.
type Config struct {
	// Binary is the nearstore executable the nodes run as.
	Binary string
	// Dir holds etcd's and the nodes' data (a temporary directory if
	// empty).
	Dir string
	// Nodes is the chain length R (default 3).
	Nodes int
	// Keys loaded before measuring (default 10000), ValueSize bytes each
	// (default 256).
	Keys, ValueSize int
	// ReadFraction of operations are reads (default 0.95); the rest
	// update existing keys.
	ReadFraction float64
	// Threads issue operations, one in flight each (default 32).
	Threads int
	// Duration of each measured run (default 3s); Repeat runs per mode
	// (default 3), the modes alternating.
	Duration time.Duration
	Repeat   int
	// ReadIOPS is each node's modelled device read rate (0: none).
	ReadIOPS float64
	// Store names the nodes' store in the report ("lsm" if empty);
	// NodeArgs are more flags for every node (e.g. --store leed).
	Store    string
	NodeArgs []string
	// Progress, if set, is told each stage.
	Progress func(string)
}

func (c *Config) defaults() {
	harness.Default(&c.Nodes, 3)
	harness.Default(&c.Keys, 10000)
	harness.Default(&c.ValueSize, 256)
	if c.ReadFraction <= 0 || c.ReadFraction > 1 {
		c.ReadFraction = 0.95
	}
	harness.Default(&c.Threads, 32)
	harness.Default(&c.Duration, 3*time.Second)
	harness.Default(&c.Repeat, 3)
	if c.Store == "" {
		c.Store = "lsm"
	}
}

// Point is one measured run of one mode.
type Point struct {
	Mode           string  `json:"mode"` // "crrs" or "tail"
	Run            int     `json:"run"`
	Ops            uint64  `json:"ops"`
	OpsPerSec      float64 `json:"ops_per_sec"`
	P50us          float64 `json:"p50_us"`
	P99us          float64 `json:"p99_us"`
	ReadP99us      float64 `json:"read_p99_us"`
	Reads          uint64  `json:"reads"`
	ReadsAtTail    uint64  `json:"reads_at_tail"`
	DirtyRedirects uint64  `json:"dirty_redirects"`
}

// Summary is a mode's medians over its runs.
type Summary struct {
	OpsPerSec float64 `json:"ops_per_sec"`
	P99us     float64 `json:"p99_us"`
	ReadP99us float64 `json:"read_p99_us"`
}

// Report is a whole run.
type Report struct {
	Config struct {
		Nodes        int     `json:"nodes"`
		Keys         int     `json:"keys"`
		ValueSize    int     `json:"value_size"`
		ReadFraction float64 `json:"read_fraction"`
		Threads      int     `json:"threads"`
		DurationSec  float64 `json:"duration_s"`
		Repeat       int     `json:"repeat"`
		ReadIOPS     float64 `json:"read_iops"`
		Store        string  `json:"store"`
	} `json:"config"`
	Machine report.Machine     `json:"machine"`
	Points  []Point            `json:"points"`
	Median  map[string]Summary `json:"median"`
	Ratio   float64            `json:"crrs_over_tail"`
	Bars    []report.Bar       `json:"bars"`
}

// Run starts the cluster, loads it, measures both modes and stops it.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if cfg.Binary == "" {
		return nil, fmt.Errorf("chainbench: no nearstore binary")
	}
	dir, removeDir, err := harness.WorkDir(cfg.Dir, "nearstore-chainbench-")
	if err != nil {
		return nil, err
	}
	defer removeDir()
	progress("starting etcd")
	e, err := cluster.StartEmbedded(ctx, cluster.EmbedConfig{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	ctl, err := cluster.Dial(e.Endpoints(), "")
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	const group = "bench"
	var ids []string
	for i := 1; i <= cfg.Nodes; i++ {
		ids = append(ids, fmt.Sprintf("n%d", i))
	}
	if _, err := ctl.CreateChain(ctx, group, ids); err != nil {
		return nil, err
	}
	var procs []*exec.Cmd
	defer func() { proc.InterruptAll(procs) }()
	for _, id := range ids {
		progress("starting node " + id)
		p := exec.CommandContext(ctx, cfg.Binary, append([]string{"cluster", "node", "--etcd", e.Endpoints()[0], "--group", group, "--id", id,
			"--data", filepath.Join(dir, id), "--read-iops", fmt.Sprint(cfg.ReadIOPS), "--log-level", "warn"}, cfg.NodeArgs...)...)
		p.Stderr = os.Stderr
		out, err := p.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := p.Start(); err != nil {
			return nil, err
		}
		procs = append(procs, p)
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "node ") {
			return nil, fmt.Errorf("chainbench: node %s did not start: %q %v", id, line, err)
		}
	}
	progress("waiting for the chain")
	for {
		c, err := ctl.Chain(ctx, group)
		if err == nil && len(c.Members) == cfg.Nodes && c.Joining == "" {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	clients := map[string]*chain.Client{}
	for mode, rm := range map[string]chain.ReadMode{"crrs": chain.ReadCRRS, "tail": chain.ReadTail} {
		c, err := chain.NewClient(ctx, chain.ClientConfig{Control: ctl, Group: group, Reads: rm})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		clients[mode] = c
	}
	progress(fmt.Sprintf("loading %d keys", cfg.Keys))
	if err := load(ctx, clients["tail"], cfg); err != nil {
		return nil, err
	}
	r := &Report{Machine: report.DescribeMachine(), Median: map[string]Summary{}}
	r.Config.Nodes, r.Config.Keys, r.Config.ValueSize = cfg.Nodes, cfg.Keys, cfg.ValueSize
	r.Config.ReadFraction, r.Config.Threads, r.Config.DurationSec = cfg.ReadFraction, cfg.Threads, cfg.Duration.Seconds()
	r.Config.Repeat, r.Config.ReadIOPS, r.Config.Store = cfg.Repeat, cfg.ReadIOPS, cfg.Store
	for run := range cfg.Repeat {
		order := []string{"crrs", "tail"}
		if run%2 == 1 {
			order = []string{"tail", "crrs"}
		}
		for _, mode := range order {
			progress(fmt.Sprintf("run %d/%d: %s", run+1, cfg.Repeat, mode))
			pt, err := measure(ctx, clients[mode], cfg)
			if err != nil {
				return r, fmt.Errorf("%s run %d: %w", mode, run+1, err)
			}
			pt.Mode, pt.Run = mode, run+1
			r.Points = append(r.Points, pt)
		}
	}
	for _, mode := range []string{"crrs", "tail"} {
		var pts []Point
		for _, p := range r.Points {
			if p.Mode == mode {
				pts = append(pts, p)
			}
		}
		r.Median[mode] = Summary{
			OpsPerSec: report.MedianOf(pts, func(p Point) float64 { return p.OpsPerSec }),
			P99us:     report.MedianOf(pts, func(p Point) float64 { return p.P99us }),
			ReadP99us: report.MedianOf(pts, func(p Point) float64 { return p.ReadP99us }),
		}
	}
	if t := r.Median["tail"].OpsPerSec; t > 0 {
		r.Ratio = r.Median["crrs"].OpsPerSec / t
	}
	r.Bars = []report.Bar{{
		What: fmt.Sprintf("CRRS throughput / tail-only throughput, R = %d, %.0f%% reads", cfg.Nodes, 100*cfg.ReadFraction),
		Want: fmt.Sprintf(">= %.1f", Bar), Got: r.Ratio, Met: r.Ratio >= Bar,
	}}
	return r, nil
}

func key(i int) []byte { return fmt.Appendf(nil, "user%08d", i) }

// value is the value of key i's version v: it names both, so a read
// checks it got a value written for that key.
func value(i int, v uint64, size int) []byte {
	b := fmt.Appendf(nil, "user%08d:%d:", i, v)
	for len(b) < size {
		b = append(b, 'x')
	}
	return b
}

func load(ctx context.Context, c *chain.Client, cfg Config) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Keys {
					return
				}
				if err := c.Put(ctx, key(i), value(i, 0, cfg.ValueSize)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func measure(ctx context.Context, c *chain.Client, cfg Config) (Point, error) {
	before := c.Stats()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		all     = hist.New()
		reads   = hist.New()
		ops     atomic.Uint64
		version atomic.Uint64
		firstEr error
	)
	deadline := time.Now().Add(cfg.Duration)
	for t := range cfg.Threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(t), uint64(time.Now().UnixNano())))
			zipf := rand.NewZipf(rng, 1.1, 1, uint64(cfg.Keys-1))
			h, hr := hist.New(), hist.New()
			var err error
			for time.Now().Before(deadline) && err == nil {
				i := int(zipf.Uint64())
				start := time.Now()
				if rng.Float64() < cfg.ReadFraction {
					var v []byte
					var found bool
					v, found, err = c.Get(ctx, key(i))
					if err == nil && (!found || !strings.HasPrefix(string(v), string(key(i))+":")) {
						err = fmt.Errorf("read %s: found=%v value %.40q", key(i), found, v)
					}
					hr.Record(time.Since(start))
				} else {
					err = c.Put(ctx, key(i), value(i, version.Add(1), cfg.ValueSize))
				}
				h.Record(time.Since(start))
				ops.Add(1)
			}
			mu.Lock()
			all.Merge(h)
			reads.Merge(hr)
			if err != nil && firstEr == nil {
				firstEr = err
			}
			mu.Unlock()
		}()
	}
	start := time.Now()
	wg.Wait()
	el := time.Since(start)
	after := c.Stats()
	return Point{
		Ops: ops.Load(), OpsPerSec: float64(ops.Load()) / el.Seconds(),
		P50us: report.Micros(all.Quantile(0.5)), P99us: report.Micros(all.Quantile(0.99)), ReadP99us: report.Micros(reads.Quantile(0.99)),
		Reads: after.Reads - before.Reads, ReadsAtTail: after.ReadsAtTail - before.ReadsAtTail,
		DirtyRedirects: after.DirtyRedirects - before.DirtyRedirects,
	}, firstEr
}

// WriteTable prints every run, the medians and the bar.
func WriteTable(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	t := &report.TableWriter{W: tw}
	store := r.Config.Store
	if store == "" {
		store = "lsm"
	}
	t.Printf("%s stores, R = %d, %d keys of %d B, %.0f%% reads (Zipf), %d threads, %.1fs runs, node read IOPS %s\n\n",
		store, r.Config.Nodes, r.Config.Keys, r.Config.ValueSize, 100*r.Config.ReadFraction, r.Config.Threads, r.Config.DurationSec, iopsLabel(r.Config.ReadIOPS))
	t.Printf("mode\trun\tops/s\tp50 µs\tp99 µs\tread p99 µs\treads at tail\tdirty redirects\t\n")
	for _, p := range r.Points {
		share := 0.0
		if p.Reads > 0 {
			share = 100 * float64(p.ReadsAtTail) / float64(p.Reads)
		}
		t.Printf("%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.1f%%\t%d\t\n", p.Mode, p.Run, p.OpsPerSec, p.P50us, p.P99us, p.ReadP99us, share, p.DirtyRedirects)
	}
	for _, m := range []string{"crrs", "tail"} {
		s := r.Median[m]
		t.Printf("%s median\t\t%.0f\t\t%.0f\t%.0f\t\t\t\n", m, s.OpsPerSec, s.P99us, s.ReadP99us)
	}
	if t.Err != nil {
		return t.Err
	}
	return report.WriteTableBars(w, tw, r.Bars)
}

func iopsLabel(v float64) string {
	if v <= 0 {
		return "unthrottled"
	}
	return fmt.Sprintf("%.0f", v)
}

package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/nearstore/nearstore/bench/hist"
	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/vfs"
)

// newLSMCmd is "nearstore lsm": kv/lsm on a local directory.
func newLSMCmd(g *globals) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "lsm",
		Short: "kv/lsm on a local directory: put, get, del, scan, stats, compact",
		Long: `lsm opens the kv/lsm store in --dir (creating it if needed) for one
operation and closes it. Keys and values are taken as given; get and scan
print them as text, or as JSON with --json.`,
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", "", "the store's directory (required)")
	open := func(cmd *cobra.Command) (*lsm.DB, error) {
		if dir == "" {
			return nil, errors.New("--dir is required")
		}
		return lsm.Open(vfs.OS(""), dir, lsm.Options{Logger: g.logger()})
	}
	var asJSON bool
	withDB := func(fn func(cmd *cobra.Command, d *lsm.DB, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			d, err := open(cmd)
			if err != nil {
				return err
			}
			err = fn(cmd, d, args)
			if cerr := d.Close(); err == nil {
				err = cerr
			}
			return err
		}
	}
	put := &cobra.Command{
		Use: "put KEY VALUE", Short: "Set KEY to VALUE (synced)", Args: cobra.ExactArgs(2),
		RunE: withDB(func(_ *cobra.Command, d *lsm.DB, a []string) error {
			return d.Set([]byte(a[0]), []byte(a[1]), &lsm.WriteOptions{Sync: true})
		}),
	}
	get := &cobra.Command{
		Use: "get KEY", Short: "Print KEY's value", Args: cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, d *lsm.DB, a []string) error {
			v, err := d.Get([]byte(a[0]))
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]string{"key": a[0], "value": string(v)})
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(v))
			return nil
		}),
	}
	del := &cobra.Command{
		Use: "del KEY [END]", Short: "Delete KEY, or every key in [KEY, END) (synced)", Args: cobra.RangeArgs(1, 2),
		RunE: withDB(func(_ *cobra.Command, d *lsm.DB, a []string) error {
			if len(a) == 2 {
				return d.DeleteRange([]byte(a[0]), []byte(a[1]), &lsm.WriteOptions{Sync: true})
			}
			return d.Delete([]byte(a[0]), &lsm.WriteOptions{Sync: true})
		}),
	}
	var limit int
	var reverse bool
	scan := &cobra.Command{
		Use: "scan [START [END]]", Short: "Print the keys in [START, END) and their values", Args: cobra.MaximumNArgs(2),
		RunE: withDB(func(cmd *cobra.Command, d *lsm.DB, a []string) error {
			o := &lsm.IterOptions{}
			if len(a) > 0 {
				o.LowerBound = []byte(a[0])
			}
			if len(a) > 1 {
				o.UpperBound = []byte(a[1])
			}
			it, err := d.NewIter(o)
			if err != nil {
				return err
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			enc := json.NewEncoder(w)
			n := 0
			ok := it.First()
			if reverse {
				ok = it.Last()
			}
			for ; ok && (limit <= 0 || n < limit); n++ {
				if asJSON {
					enc.Encode(map[string]string{"key": string(it.Key()), "value": string(it.Value())})
				} else {
					fmt.Fprintf(w, "%s\t%s\n", it.Key(), it.Value())
				}
				if reverse {
					ok = it.Prev()
				} else {
					ok = it.Next()
				}
			}
			if err := it.Close(); err != nil {
				return err
			}
			return w.Flush()
		}),
	}
	scan.Flags().IntVar(&limit, "limit", 0, "print at most this many keys (0: all)")
	scan.Flags().BoolVar(&reverse, "reverse", false, "from the last key down")
	stats := &cobra.Command{
		Use: "stats", Short: "Print the store's metrics", Args: cobra.NoArgs,
		RunE: withDB(func(cmd *cobra.Command, d *lsm.DB, _ []string) error {
			m := d.Metrics()
			if asJSON {
				e := json.NewEncoder(cmd.OutOrStdout())
				e.SetIndent("", "  ")
				return e.Encode(m)
			}
			fmt.Fprint(cmd.OutOrStdout(), m.String())
			return nil
		}),
	}
	compact := &cobra.Command{
		Use: "compact [START END]", Short: "Flush and compact [START, END] (default everything) down to one level", Args: cobra.RangeArgs(0, 2),
		RunE: withDB(func(cmd *cobra.Command, d *lsm.DB, a []string) error {
			start, end := []byte{}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
			if len(a) == 2 {
				start, end = []byte(a[0]), []byte(a[1])
			} else if len(a) == 1 {
				return errors.New("compact takes no range or both START and END")
			}
			return d.Compact(cmd.Context(), start, end)
		}),
	}
	for _, c := range []*cobra.Command{get, scan, stats} {
		c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	cmd.AddCommand(put, get, del, scan, stats, compact)
	return cmd
}

// lsmEngine is one side of "bench lsm".
type lsmEngine interface {
	name() string
	set(k, v []byte) error
	get(k []byte) (bool, error)
	// settle flushes and waits for background compactions to finish.
	settle(ctx context.Context) error
	close() error
}

type ourEngine struct{ d *lsm.DB }

func (e ourEngine) name() string          { return "kv/lsm" }
func (e ourEngine) set(k, v []byte) error { return e.d.Set(k, v, nil) }
func (e ourEngine) close() error          { return e.d.Close() }
func (e ourEngine) get(k []byte) (bool, error) {
	_, err := e.d.Get(k)
	if errors.Is(err, lsm.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
func (e ourEngine) settle(ctx context.Context) error {
	if err := e.d.Flush(ctx); err != nil {
		return err
	}
	return waitIdle(ctx, func() bool {
		m := e.d.Metrics()
		return m.Compact.InProgress == 0 && !m.Flush.InProgress
	})
}

// waitIdle polls idle every 100ms until it holds three times in a row
// (a finishing compaction may schedule the next), or ten minutes pass.
func waitIdle(ctx context.Context, idle func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for n := 0; n < 3; {
		if idle() {
			n++
		} else {
			n = 0
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for compactions to finish: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

type pebbleEngine struct {
	d     *pebble.DB
	cache *pebble.Cache
}

func (e pebbleEngine) name() string          { return "pebble" }
func (e pebbleEngine) set(k, v []byte) error { return e.d.Set(k, v, pebble.NoSync) }
func (e pebbleEngine) close() error {
	err := e.d.Close()
	e.cache.Unref()
	return err
}
func (e pebbleEngine) get(k []byte) (bool, error) {
	_, closer, err := e.d.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, closer.Close()
}
func (e pebbleEngine) settle(ctx context.Context) error {
	if err := e.d.Flush(); err != nil {
		return err
	}
	return waitIdle(ctx, func() bool {
		m := e.d.Metrics()
		return m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0
	})
}

// zipfian is YCSB's ZipfianGenerator (Gray et al.), scrambled by FNV so
// popular keys spread over the key space, as YCSB's scrambled zipfian.
type zipfian struct {
	n                        uint64
	theta, alpha, zetan, eta float64
	half                     float64
}

func newZipfian(n uint64, theta float64) *zipfian {
	z := &zipfian{n: n, theta: theta, alpha: 1 / (1 - theta)}
	for i := uint64(1); i <= n; i++ {
		z.zetan += 1 / math.Pow(float64(i), theta)
	}
	zeta2 := 1 + 1/math.Pow(2, theta)
	z.eta = (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/z.zetan)
	z.half = 1 + math.Pow(0.5, theta)
	return z
}

func (z *zipfian) next(r *rand.Rand) uint64 {
	u := r.Float64()
	uz := u * z.zetan
	var v uint64
	switch {
	case uz < 1:
		v = 0
	case uz < z.half:
		v = 1
	default:
		v = uint64(float64(z.n) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	}
	return fnvHash(v) % z.n
}

func fnvHash(v uint64) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	h.Write(b[:])
	return h.Sum64()
}

// ycsbKey is record i's key: YCSB's "user" + hashed number, so loads
// insert in random order.
func ycsbKey(i uint64) []byte { return []byte(fmt.Sprintf("user%020d", fnvHash(i))) }

// lsmPhase is one workload's result on one engine.
type lsmPhase struct {
	Engine    string  `json:"engine"`
	Workload  string  `json:"workload"`
	Ops       uint64  `json:"ops"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	// WriteAmp (Load only): bytes this process passed to write calls
	// while loading and settling, over the key and value bytes loaded.
	WriteAmp float64 `json:"write_amp,omitempty"`
	Seconds  float64 `json:"seconds"`
}

type lsmBar struct {
	What string  `json:"what"`
	Want float64 `json:"want"`
	Got  float64 `json:"got"`
	Met  bool    `json:"met"`
}

type lsmReport struct {
	Records   uint64 `json:"records"`
	Ops       uint64 `json:"ops"`
	Threads   int    `json:"threads"`
	ValueSize int    `json:"value_size"`
	Dist      string `json:"distribution"`
	// Phases are the medians over Runs of each figure, taken apart.
	Phases []lsmPhase   `json:"phases"`
	Runs   [][]lsmPhase `json:"runs"`
	Bars   []lsmBar     `json:"bars"`
}

// medianPhases returns, per engine and workload in first-seen order, the
// median of each figure over the runs.
func medianPhases(runs [][]lsmPhase) []lsmPhase {
	var keys []string
	groups := map[string][]lsmPhase{}
	for _, run := range runs {
		for _, p := range run {
			k := p.Engine + "/" + p.Workload
			if _, ok := groups[k]; !ok {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], p)
		}
	}
	slices.SortStableFunc(keys, func(a, b string) int { return strings.Compare(strings.Split(a, "/")[0], strings.Split(b, "/")[0]) })
	median := func(ps []lsmPhase, f func(lsmPhase) float64) float64 {
		v := make([]float64, len(ps))
		for i, p := range ps {
			v[i] = f(p)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	var out []lsmPhase
	for _, k := range keys {
		ps := groups[k]
		out = append(out, lsmPhase{
			Engine: ps[0].Engine, Workload: ps[0].Workload, Ops: ps[0].Ops,
			OpsPerSec: median(ps, func(p lsmPhase) float64 { return p.OpsPerSec }),
			P50us:     median(ps, func(p lsmPhase) float64 { return p.P50us }),
			P99us:     median(ps, func(p lsmPhase) float64 { return p.P99us }),
			WriteAmp:  median(ps, func(p lsmPhase) float64 { return p.WriteAmp }),
			Seconds:   median(ps, func(p lsmPhase) float64 { return p.Seconds }),
		})
	}
	return out
}

// procWchar is the bytes this process has passed to write system calls.
func procWchar() (uint64, error) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no wchar in /proc/self/io")
}

// runLSMPhase runs ops operations over threads goroutines; op(i, rng)
// does operation i.
func runLSMPhase(ctx context.Context, threads int, ops uint64, op func(i uint64, r *rand.Rand) error) (*hist.Histogram, time.Duration, error) {
	return runLSMPhaseProgress(ctx, threads, ops, op, nil)
}

// runLSMPhaseProgress is runLSMPhase that also calls progress with the
// operations started, every 2 seconds, if progress is set.
func runLSMPhaseProgress(ctx context.Context, threads int, ops uint64, op func(i uint64, r *rand.Rand) error, progress func(done uint64)) (*hist.Histogram, time.Duration, error) {
	var next atomic.Uint64
	if progress != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(2 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					progress(min(next.Load(), ops))
				}
			}
		}()
	}
	hists := make([]*hist.Histogram, threads)
	errs := make([]error, threads)
	var wg sync.WaitGroup
	start := time.Now()
	for t := 0; t < threads; t++ {
		hists[t] = hist.New()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(t), 42))
			for {
				i := next.Add(1) - 1
				if i >= ops || ctx.Err() != nil {
					return
				}
				s := time.Now()
				if err := op(i, r); err != nil {
					errs[t] = err
					return
				}
				hists[t].Record(time.Since(s))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	h := hist.New()
	for _, x := range hists {
		h.Merge(x)
	}
	return h, el, errors.Join(append(errs, ctx.Err())...)
}

func newBenchLSMCmd(g *globals) *cobra.Command {
	var (
		dir, dist          string
		records, ops       uint64
		threads, valueSize int
		memtable, cache    int64
		asJSON, keep       bool
		repeat             int
		pebbleCompression  string
	)
	cmd := &cobra.Command{
		Use:   "lsm",
		Short: "kv/lsm vs Pebble: YCSB Load, A and C on a local directory",
		Long: `lsm loads --records records of --value-size random bytes into kv/lsm and
into Pebble (v2) in turn, each in its own directory under --dir, with the
same memtable size, block cache and threads, and with Pebble's blocks
uncompressed like kv/lsm's (--pebble-compression), and runs YCSB A (50% reads,
50% updates) and C (100% reads) with --ops operations over a zipfian
(theta 0.99, scrambled) or uniform key choice. Writes are not synced. It
reports throughput, p50/p99 latency and, for Load, write amplification:
bytes this process passed to write calls while loading and settling
(flush, then wait for compactions) over the bytes loaded. Each of --repeat
runs uses fresh stores, the engines alternating which goes first; the
report gives each figure's median. Bars: kv/lsm at
least 0.7x Pebble's throughput on Load, A and C, and at most 1.2x its
write amplification on Load.`,
		Example: `  nearstore bench lsm --records 200000 --ops 200000 --json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := benchLogger(cmd, g)
			base := dir
			if base == "" {
				d, err := os.MkdirTemp("", "nearstore-bench-lsm-")
				if err != nil {
					return err
				}
				base = d
			}
			if !keep {
				defer os.RemoveAll(base)
			}
			if pebbleCompression != "none" && pebbleCompression != "snappy" {
				return fmt.Errorf("--pebble-compression %q: want none or snappy", pebbleCompression)
			}
			var zipf *zipfian
			switch dist {
			case "zipfian":
				zipf = newZipfian(records, 0.99)
			case "uniform":
			default:
				return fmt.Errorf("--distribution %q: want zipfian or uniform", dist)
			}
			pick := func(r *rand.Rand) uint64 {
				if zipf != nil {
					return zipf.next(r)
				}
				return r.Uint64N(records)
			}
			value := func(r *rand.Rand) []byte {
				v := make([]byte, valueSize)
				for i := 0; i+8 <= len(v); i += 8 {
					binary.LittleEndian.PutUint64(v[i:], r.Uint64())
				}
				return v
			}
			rep := lsmReport{Records: records, Ops: ops, Threads: threads, ValueSize: valueSize, Dist: dist}
			var runDir string
			opens := []func() (lsmEngine, error){
				func() (lsmEngine, error) {
					d, err := lsm.Open(vfs.OS(""), filepath.Join(runDir, "kvlsm"), lsm.Options{
						MemTableSize: int(memtable), BlockCacheSize: cache, Logger: log,
					})
					return ourEngine{d}, err
				},
				func() (lsmEngine, error) {
					c := pebble.NewCache(cache)
					po := &pebble.Options{Cache: c, MemTableSize: uint64(memtable), Logger: pebbleLog{log}}
					if pebbleCompression == "none" {
						for i := range po.Levels {
							po.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
						}
					}
					d, err := pebble.Open(filepath.Join(runDir, "pebble"), po)
					if err != nil {
						c.Unref()
						return nil, err
					}
					return pebbleEngine{d: d, cache: c}, nil
				},
			}
			userBytes := float64(records) * float64(len(ycsbKey(0))+valueSize)
			for run := 0; run < repeat; run++ {
				runDir = filepath.Join(base, fmt.Sprintf("run%d", run))
				order := opens
				if run%2 == 1 {
					// Alternate which engine goes first.
					order = []func() (lsmEngine, error){opens[1], opens[0]}
				}
				var phases []lsmPhase
				for _, open := range order {
					e, err := open()
					if err != nil {
						return err
					}
					w0, err := procWchar()
					if err != nil {
						e.close()
						return err
					}
					h, el, err := runLSMPhaseProgress(ctx, threads, records, func(i uint64, r *rand.Rand) error {
						return e.set(ycsbKey(i), value(r))
					}, func(done uint64) {
						fmt.Fprintf(cmd.ErrOrStderr(), "%s: loading, %d of %d records (%.0f%%)\n", e.name(), done, records, 100*float64(done)/float64(records))
					})
					settleStart := time.Now()
					if err == nil {
						err = e.settle(ctx)
					}
					if err != nil {
						e.close()
						return fmt.Errorf("%s load: %w", e.name(), err)
					}
					w1, _ := procWchar()
					phases = append(phases, phaseOf(e.name(), "load", records, h, el, float64(w1-w0)/userBytes))
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: load %d records in %s, settled in %s\n", e.name(), records, el.Round(time.Millisecond), time.Since(settleStart).Round(time.Millisecond))
					for _, wl := range []struct {
						name  string
						reads float64
					}{{"A", 0.5}, {"C", 1}} {
						var missing atomic.Uint64
						h, el, err := runLSMPhase(ctx, threads, ops, func(i uint64, r *rand.Rand) error {
							k := ycsbKey(pick(r))
							if r.Float64() < wl.reads {
								ok, err := e.get(k)
								if !ok {
									missing.Add(1)
								}
								return err
							}
							return e.set(k, value(r))
						})
						if err != nil {
							e.close()
							return fmt.Errorf("%s %s: %w", e.name(), wl.name, err)
						}
						if missing.Load() > 0 {
							e.close()
							return fmt.Errorf("%s %s: %d reads missed loaded keys", e.name(), wl.name, missing.Load())
						}
						phases = append(phases, phaseOf(e.name(), wl.name, ops, h, el, 0))
					}
					if err := e.close(); err != nil {
						return err
					}
				}
				rep.Runs = append(rep.Runs, phases)
				if !keep {
					os.RemoveAll(runDir)
				}
			}
			rep.Phases = medianPhases(rep.Runs)
			byKey := map[string]lsmPhase{}
			for _, p := range rep.Phases {
				byKey[p.Engine+"/"+p.Workload] = p
			}
			for _, wl := range []string{"load", "A", "C"} {
				ours, theirs := byKey["kv/lsm/"+wl], byKey["pebble/"+wl]
				got := ours.OpsPerSec / theirs.OpsPerSec
				rep.Bars = append(rep.Bars, lsmBar{What: "throughput vs pebble, " + wl, Want: 0.7, Got: got, Met: got >= 0.7})
			}
			wa := byKey["kv/lsm/load"].WriteAmp / byKey["pebble/load"].WriteAmp
			rep.Bars = append(rep.Bars, lsmBar{What: "write amp vs pebble, load", Want: 1.2, Got: wa, Met: wa <= 1.2})
			if asJSON {
				e := json.NewEncoder(cmd.OutOrStdout())
				e.SetIndent("", "  ")
				return e.Encode(rep)
			}
			printLSMReport(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory to hold both stores (default: a temporary one, removed after)")
	f.BoolVar(&keep, "keep", false, "keep the stores after the run")
	f.Uint64Var(&records, "records", 200000, "records loaded")
	f.Uint64Var(&ops, "ops", 200000, "operations per workload (A, C)")
	f.IntVar(&threads, "threads", 4, "client goroutines")
	f.IntVar(&valueSize, "value-size", 1024, "value bytes")
	f.Int64Var(&memtable, "memtable", 64<<20, "memtable size, both engines")
	f.Int64Var(&cache, "cache", 64<<20, "block cache bytes, both engines")
	f.StringVar(&dist, "distribution", "zipfian", "key choice for A and C: zipfian or uniform")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&pebbleCompression, "pebble-compression", "none",
		"Pebble's block compression: none (as kv/lsm's tables) or snappy (Pebble's default)")
	f.IntVar(&repeat, "repeat", 3, "runs; engines alternate going first, and the report gives medians")
	return cmd
}

// pebbleLog sends Pebble's log to slog: its routine messages at debug.
type pebbleLog struct{ l *slog.Logger }

func (p pebbleLog) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "engine", "pebble")
}
func (p pebbleLog) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "engine", "pebble")
}
func (p pebbleLog) Fatalf(format string, args ...any) { panic(fmt.Sprintf("pebble: "+format, args...)) }

func phaseOf(engine, wl string, ops uint64, h *hist.Histogram, el time.Duration, wamp float64) lsmPhase {
	return lsmPhase{
		Engine: engine, Workload: wl, Ops: ops, Seconds: el.Seconds(),
		OpsPerSec: float64(ops) / el.Seconds(),
		P50us:     float64(h.Quantile(0.5)) / 1e3,
		P99us:     float64(h.Quantile(0.99)) / 1e3,
		WriteAmp:  wamp,
	}
}

func printLSMReport(w io.Writer, rep lsmReport) {
	fmt.Fprintf(w, "%d records of %d bytes, %d ops, %d threads, %s; medians of %d runs\n", rep.Records, rep.ValueSize, rep.Ops, rep.Threads, rep.Dist, len(rep.Runs))
	fmt.Fprintf(w, "%-8s %-5s %12s %10s %10s %9s\n", "engine", "wl", "ops/s", "p50 µs", "p99 µs", "w-amp")
	for _, p := range rep.Phases {
		wa := ""
		if p.WriteAmp > 0 {
			wa = fmt.Sprintf("%.2f", p.WriteAmp)
		}
		fmt.Fprintf(w, "%-8s %-5s %12.0f %10.1f %10.1f %9s\n", p.Engine, p.Workload, p.OpsPerSec, p.P50us, p.P99us, wa)
	}
	for _, b := range rep.Bars {
		v := "met"
		if !b.Met {
			v = "NOT met"
		}
		fmt.Fprintf(w, "%-32s want %.2f got %.3f  %s\n", b.What, b.Want, b.Got, v)
	}
}

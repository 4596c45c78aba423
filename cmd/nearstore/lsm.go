package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"image/color"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/nearstore/nearstore/bench/hist"
	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/vfs"
)

// newLSMCmd is "nearstore lsm": kv/lsm on a local directory, or in a
// directory of an offloadfs on a target.
func newLSMCmd(g *globals) *cobra.Command {
	var (
		dir, fsDir string
		c          conn
	)
	cmd := &cobra.Command{
		Use:   "lsm",
		Short: "kv/lsm on a local directory or on offloadfs: put, get, del, scan, stats, compact",
		Long: `lsm opens the kv/lsm store for one operation and closes it. The store is in
the local directory --dir, or, with --fs-dir, in that directory of the
offloadfs on namespace --nsid of --nqn at --addr (default $NEARSTORE_ADDR,
$NEARSTORE_NQN). A command creates the store if it is not there, but on
offloadfs only put, del and compact do: they mount the file system
read-write (one read-write mount per host at a time), while get, scan and
stats mount it read-only, keep whatever opening the store writes (a fresh
log, a recovery flush) in memory, and so change nothing on the target. Keys and values are taken as given;
get, scan and stats print text, or JSON with --json.`,
		Example: `  nearstore lsm put user1 alice --dir /tmp/db
  nearstore lsm get user1 --dir /tmp/db
  nearstore lsm put user1 alice --fs-dir /db -a 127.0.0.1:4420
  nearstore lsm scan --fs-dir /db --json`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&dir, "dir", "", "the store's local directory")
	pf.StringVar(&fsDir, "fs-dir", "", "the store's directory in the offloadfs on the target (instead of --dir)")
	pf.StringVarP(&c.addr, "addr", "a", envOr("NEARSTORE_ADDR", "127.0.0.1:4420"), "target address, with --fs-dir (host:port; default $NEARSTORE_ADDR)")
	pf.StringVarP(&c.nqn, "nqn", "n", envOr("NEARSTORE_NQN", defaultNQN), "subsystem NQN, with --fs-dir (default $NEARSTORE_NQN)")
	pf.Uint32Var(&c.nsid, "nsid", 1, "namespace ID, with --fs-dir")
	pf.BoolVar(&c.digests, "digests", false, "request header and data digests (CRC32C), with --fs-dir")
	pf.StringVar(&c.hostNQN, "hostnqn", "", "this host's NQN, with --fs-dir (default: "+host.HostNQNFile+", else derived from /etc/machine-id)")
	pf.StringVar(&c.hostID, "hostid", "", "this host's ID, a UUID, with --fs-dir (default: "+host.HostIDFile+", else derived with the NQN)")
	// open opens the store; done closes it and, on offloadfs, unmounts.
	open := func(cmd *cobra.Command, rw bool) (d *lsm.DB, done func() error, err error) {
		opts := lsm.Options{Logger: g.logger()}
		switch {
		case dir != "" && fsDir != "":
			return nil, nil, usageErrorf("--dir and --fs-dir: give one (a local directory, or one in offloadfs)")
		case dir != "":
			d, err := lsm.Open(vfs.OS(""), dir, opts)
			if err != nil {
				return nil, nil, fmt.Errorf("open store in %s: %w", dir, err)
			}
			return d, d.Close, nil
		case fsDir == "":
			return nil, nil, usageErrorf("--dir or --fs-dir is required")
		}
		p := fsPath(fsDir)
		s, err := fsMount(cmd.Context(), g, &c, fsMountOpts{rw: rw})
		if err != nil {
			return nil, nil, err
		}
		var v vfs.FS = s.fsys.VFS()
		if !rw {
			if st, err := v.Stat(p); err != nil || !st.IsDir() {
				s.close()
				if err == nil {
					err = fs.ErrInvalid
				}
				return nil, nil, fmt.Errorf("no store in %s on namespace %d of %s: %w", p, c.nsid, c.nqn, fsDescribe(err))
			}
			v = newOverlayFS(v)
		}
		d, err = lsm.Open(v, p, opts)
		if err != nil {
			s.close()
			return nil, nil, fmt.Errorf("open store in %s on namespace %d of %s: %w", p, c.nsid, c.nqn, err)
		}
		return d, func() error {
			err := d.Close()
			if err != nil {
				err = fmt.Errorf("close store in %s: %w", p, err)
			}
			return errors.Join(err, s.close())
		}, nil
	}
	var asJSON bool
	// withDB runs fn on the open store; rw: fn writes.
	withDB := func(rw bool, fn func(cmd *cobra.Command, d *lsm.DB, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			d, done, err := open(cmd, rw)
			if err != nil {
				return err
			}
			err = fn(cmd, d, args)
			if cerr := done(); err == nil {
				err = cerr
			}
			return err
		}
	}
	put := &cobra.Command{
		Use: "put KEY VALUE", Short: "Set KEY to VALUE (synced)", Args: cobra.ExactArgs(2),
		RunE: withDB(true, func(_ *cobra.Command, d *lsm.DB, a []string) error {
			return d.Set([]byte(a[0]), []byte(a[1]), &lsm.WriteOptions{Sync: true})
		}),
	}
	get := &cobra.Command{
		Use: "get KEY", Short: "Print KEY's value", Args: cobra.ExactArgs(1),
		RunE: withDB(false, func(cmd *cobra.Command, d *lsm.DB, a []string) error {
			v, err := d.Get([]byte(a[0]))
			if err != nil {
				return fmt.Errorf("get %q: %w", a[0], err)
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
		RunE: withDB(true, func(_ *cobra.Command, d *lsm.DB, a []string) error {
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
		RunE: withDB(false, func(cmd *cobra.Command, d *lsm.DB, a []string) error {
			o := &lsm.IterOptions{}
			if len(a) > 0 {
				o.LowerBound = []byte(a[0])
			}
			if len(a) > 1 {
				o.UpperBound = []byte(a[1])
			}
			it, err := d.NewIter(o)
			if err != nil {
				return fmt.Errorf("scan: %w", err)
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
				return fmt.Errorf("scan: %w", err)
			}
			return w.Flush()
		}),
	}
	scan.Flags().IntVar(&limit, "limit", 0, "print at most this many keys (0: all)")
	scan.Flags().BoolVar(&reverse, "reverse", false, "from the last key down")
	stats := &cobra.Command{
		Use: "stats", Short: "Print the store's metrics", Args: cobra.NoArgs,
		RunE: withDB(false, func(cmd *cobra.Command, d *lsm.DB, _ []string) error {
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
		RunE: withDB(true, func(cmd *cobra.Command, d *lsm.DB, a []string) error {
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
		dir, dist, plotFile string
		records, ops        uint64
		threads, valueSize  int
		memtable, cache     int64
		asJSON, keep        bool
		repeat              int
		pebbleCompression   string
		push                lsmPushFlags
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
write amplification on Load. --plot FILE draws the medians: throughput
per workload for both engines, and write amplification on Load.

` + lsmPushHelp,
		Example: `  nearstore bench lsm --records 200000 --ops 200000 --json
  nearstore bench lsm --mode plain,pushdown,pebble --workload C,B --plot lsm-pushdown.png
  nearstore bench lsm --records 200000 --ops 200000 --plot lsm.png`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if push.mode != "" {
				return push.run(cmd, g, lsmPushArgs{records: records, valueSize: valueSize, threads: threads,
					repeat: repeat, cache: cache, asJSON: asJSON, plotFile: plotFile})
			}
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
			return benchOutput(cmd, asJSON, plotFile, rep,
				func() error { printLSMReport(cmd.OutOrStdout(), rep); return nil },
				func() error { return saveLSMPlot(plotFile, rep) })
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
	f.StringVar(&plotFile, "plot", "", "write throughput per workload and load write amplification, both engines, to this file (.png, .svg or .pdf)")
	f.StringVar(&pebbleCompression, "pebble-compression", "none",
		"Pebble's block compression: none (as kv/lsm's tables) or snappy (Pebble's default)")
	f.IntVar(&repeat, "repeat", 3, "runs; engines alternate going first, and the report gives medians")
	push.add(f)
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

// lsmPlots are "bench lsm"'s charts: the medians' throughput per
// workload, the engines side by side with kv/lsm's ratio to Pebble above
// each group, and each engine's write amplification on Load.
func lsmPlots(rep lsmReport) ([]*plot.Plot, error) {
	var engines, workloads []string
	byKey := map[string]lsmPhase{}
	for _, p := range rep.Phases {
		if !slices.Contains(engines, p.Engine) {
			engines = append(engines, p.Engine)
		}
		if !slices.Contains(workloads, p.Workload) {
			workloads = append(workloads, p.Workload)
		}
		byKey[p.Engine+"/"+p.Workload] = p
	}
	if len(engines) == 0 {
		return nil, errors.New("plot: no results")
	}
	colors := [...]color.RGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
		{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	}
	sub := fmt.Sprintf("%d records of %d B, %d ops, %d threads, %s; medians of %d runs",
		rep.Records, rep.ValueSize, rep.Ops, rep.Threads, rep.Dist, len(rep.Runs))
	width := vg.Points(20)

	tp := plot.New()
	tp.Title.Text = "YCSB throughput\n" + sub
	if len(engines) == 2 {
		tp.Title.Text += fmt.Sprintf("\nlabels: %s ÷ %s", engines[0], engines[1])
	}
	tp.Y.Label.Text = "ops/s"
	tp.Y.Min = 0
	tp.Legend.Top, tp.Legend.Left = true, true
	tp.Add(plotter.NewGrid())
	var top float64
	for i, e := range engines {
		vs := make(plotter.Values, len(workloads))
		for j, w := range workloads {
			vs[j] = byKey[e+"/"+w].OpsPerSec
			top = max(top, vs[j])
		}
		b, err := plotter.NewBarChart(vs, width)
		if err != nil {
			return nil, fmt.Errorf("plot throughput: %w", err)
		}
		b.Color = colors[i%len(colors)]
		b.LineStyle.Width = 0
		b.Offset = width * vg.Length(float64(i)-float64(len(engines)-1)/2)
		tp.Add(b)
		tp.Legend.Add(e, b)
	}
	if len(engines) == 2 {
		xy := plotter.XYLabels{}
		for j, w := range workloads {
			a, b := byKey[engines[0]+"/"+w].OpsPerSec, byKey[engines[1]+"/"+w].OpsPerSec
			if b <= 0 {
				continue
			}
			xy.XYs = append(xy.XYs, plotter.XY{X: float64(j), Y: max(a, b) + top*0.02})
			xy.Labels = append(xy.Labels, fmt.Sprintf("%.2f×", a/b))
		}
		if len(xy.XYs) > 0 {
			l, err := plotter.NewLabels(xy)
			if err != nil {
				return nil, fmt.Errorf("plot throughput: %w", err)
			}
			for i := range l.TextStyle {
				l.TextStyle[i].XAlign = draw.XCenter
			}
			tp.Add(l)
		}
	}
	names := make([]string, len(workloads))
	for j, w := range workloads {
		names[j] = w
		if w != "load" {
			names[j] = "YCSB " + w
		}
	}
	tp.NominalX(names...)
	tp.X.Min, tp.X.Max = -0.6, float64(len(workloads))-0.4
	tp.Y.Max = max(top, 1) * 1.2

	wp := plot.New()
	wp.Title.Text = "Write amplification on Load\n(bytes written ÷ bytes loaded)"
	wp.Y.Label.Text = "write amplification"
	wp.Y.Min = 0
	wp.Add(plotter.NewGrid())
	xy := plotter.XYLabels{}
	var wtop float64
	for i, e := range engines {
		wa := byKey[e+"/load"].WriteAmp
		wtop = max(wtop, wa)
		vs := make(plotter.Values, len(engines))
		vs[i] = wa
		b, err := plotter.NewBarChart(vs, vg.Points(36))
		if err != nil {
			return nil, fmt.Errorf("plot write amplification: %w", err)
		}
		b.Color = colors[i%len(colors)]
		b.LineStyle.Width = 0
		wp.Add(b)
		xy.XYs = append(xy.XYs, plotter.XY{X: float64(i), Y: wa})
		xy.Labels = append(xy.Labels, fmt.Sprintf("%.2f", wa))
	}
	l, err := plotter.NewLabels(xy)
	if err != nil {
		return nil, fmt.Errorf("plot write amplification: %w", err)
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = draw.XCenter
	}
	l.Offset = vg.Point{Y: vg.Points(4)}
	wp.Add(l)
	wp.NominalX(engines...)
	wp.X.Min, wp.X.Max = -0.6, float64(len(engines))-0.4
	wp.Y.Max = max(wtop, 1) * 1.25
	return []*plot.Plot{tp, wp}, nil
}

// saveLSMPlot renders lsmPlots side by side, 11 by 5 inches, to path in
// the format its extension names (png, svg or pdf). A failed render
// leaves no file behind.
func saveLSMPlot(file string, rep lsmReport) error {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(file), "."))
	plots, err := lsmPlots(rep)
	if err != nil {
		return err
	}
	c, err := draw.NewFormattedCanvas(11*vg.Inch, 5*vg.Inch, format)
	if err != nil {
		return fmt.Errorf("plot %s: %w", file, err)
	}
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 8, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	cs := plot.Align([][]*plot.Plot{plots}, tiles, draw.New(c))
	for i, p := range plots {
		p.Draw(cs[0][i])
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		os.Remove(file)
		return fmt.Errorf("plot %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot %s: %w", file, err)
	}
	return nil
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

// overlayFS lets a store open on a read-only file system: reads fall
// through to base until a name is created, removed or renamed over, and
// everything written lives in memory, lost at exit. lsm.Open writes a
// fresh log and MANIFEST and may flush a recovered memtable; with this
// under it, get, scan and stats change nothing on the target.
type overlayFS struct {
	base  vfs.FS
	mu    sync.Mutex
	files map[string]*overlayData // written here
	gone  map[string]bool         // hidden in base
	dirs  map[string]bool         // made here
}

func newOverlayFS(base vfs.FS) *overlayFS {
	return &overlayFS{base: base, files: map[string]*overlayData{}, gone: map[string]bool{}, dirs: map[string]bool{}}
}

type overlayData struct {
	mu   sync.Mutex
	name string
	b    []byte
}

// overlayFile is one open handle, with its own cursor.
type overlayFile struct {
	d        *overlayData
	pos      int64
	readOnly bool
}

func (o *overlayFS) clean(name string) string { return path.Clean(name) }

// isDir says whether name is a directory here; o.mu is held.
func (o *overlayFS) isDir(name string) bool {
	switch {
	case name == "." || name == "/":
		return true
	case o.gone[name]:
		return false
	case o.dirs[name]:
		return true
	}
	if _, ok := o.files[name]; ok {
		return false
	}
	st, err := o.base.Stat(name)
	return err == nil && st.IsDir()
}

// parentOK fails unless name's directory exists; o.mu is held.
func (o *overlayFS) parentOK(op, name string) error {
	if !o.isDir(path.Dir(name)) {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return nil
}

// copyUp brings base's name into memory; o.mu is held.
func (o *overlayFS) copyUp(name string) (*overlayData, error) {
	if d, ok := o.files[name]; ok {
		return d, nil
	}
	if o.gone[name] {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	f, err := o.base.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, math.MaxInt64))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	d := &overlayData{name: name, b: b}
	o.files[name] = d
	return d, nil
}

func (o *overlayFS) Create(name string) (vfs.File, error) {
	name = o.clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.parentOK("create", name); err != nil {
		return nil, err
	}
	d := &overlayData{name: name}
	o.files[name] = d
	delete(o.gone, name)
	return &overlayFile{d: d}, nil
}

func (o *overlayFS) Open(name string) (vfs.File, error) {
	name = o.clean(name)
	o.mu.Lock()
	d, ok := o.files[name]
	gone := o.gone[name]
	o.mu.Unlock()
	switch {
	case ok:
		return &overlayFile{d: d, readOnly: true}, nil
	case gone:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return o.base.Open(name)
}

func (o *overlayFS) OpenReadWrite(name string) (vfs.File, error) {
	name = o.clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	d, err := o.copyUp(name)
	if errors.Is(err, fs.ErrNotExist) {
		if err = o.parentOK("open", name); err == nil {
			d = &overlayData{name: name}
			o.files[name] = d
			delete(o.gone, name)
		}
	}
	if err != nil {
		return nil, err
	}
	return &overlayFile{d: d}, nil
}

func (o *overlayFS) Remove(name string) error {
	name = o.clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.files[name]; ok {
		delete(o.files, name)
		o.gone[name] = true
		return nil
	}
	if o.gone[name] {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	if o.isDir(name) {
		names, err := o.listLocked(name)
		if err != nil {
			return err
		}
		if len(names) > 0 {
			return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
		}
		delete(o.dirs, name)
		o.gone[name] = true
		return nil
	}
	if _, err := o.base.Stat(name); err != nil {
		return err
	}
	o.gone[name] = true
	return nil
}

func (o *overlayFS) Rename(oldname, newname string) error {
	oldname, newname = o.clean(oldname), o.clean(newname)
	o.mu.Lock()
	defer o.mu.Unlock()
	d, err := o.copyUp(oldname)
	if err != nil {
		return err
	}
	if err := o.parentOK("rename", newname); err != nil {
		return err
	}
	delete(o.files, oldname)
	o.gone[oldname] = true
	d.name = newname
	o.files[newname] = d
	delete(o.gone, newname)
	return nil
}

func (o *overlayFS) MkdirAll(dir string) error {
	dir = o.clean(dir)
	if st, err := o.base.Stat(dir); err == nil && st.IsDir() {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for d := dir; d != "." && d != "/"; d = path.Dir(d) {
		if o.isDir(d) {
			break
		}
		if _, ok := o.files[d]; ok {
			return &fs.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR}
		}
		o.dirs[d] = true
		delete(o.gone, d)
	}
	return nil
}

func (o *overlayFS) List(dir string) ([]string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.listLocked(o.clean(dir))
}

// listLocked is List with o.mu held.
func (o *overlayFS) listLocked(dir string) ([]string, error) {
	names, err := o.base.List(dir)
	if o.gone[dir] {
		return nil, &fs.PathError{Op: "list", Path: dir, Err: fs.ErrNotExist}
	}
	if err != nil && !(errors.Is(err, fs.ErrNotExist) && o.dirs[dir]) {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if !o.gone[path.Join(dir, n)] {
			out = append(out, n)
		}
	}
	for p := range o.files {
		if path.Dir(p) == dir {
			out = append(out, path.Base(p))
		}
	}
	for p := range o.dirs {
		if path.Dir(p) == dir {
			out = append(out, path.Base(p))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func (o *overlayFS) Stat(name string) (fs.FileInfo, error) {
	name = o.clean(name)
	o.mu.Lock()
	d, ok := o.files[name]
	gone, isDir := o.gone[name], o.dirs[name]
	o.mu.Unlock()
	switch {
	case ok:
		return d.stat(), nil
	case gone:
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	case isDir:
		return overlayInfo{name: path.Base(name), dir: true}, nil
	}
	return o.base.Stat(name)
}

func (o *overlayFS) SyncDir(string) error           { return nil }
func (o *overlayFS) PathJoin(elem ...string) string { return o.base.PathJoin(elem...) }

type overlayInfo struct {
	name string
	size int64
	dir  bool
}

func (i overlayInfo) Name() string       { return i.name }
func (i overlayInfo) Size() int64        { return i.size }
func (i overlayInfo) ModTime() time.Time { return time.Time{} }
func (i overlayInfo) IsDir() bool        { return i.dir }
func (i overlayInfo) Sys() any           { return nil }
func (i overlayInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}

func (d *overlayData) stat() fs.FileInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	return overlayInfo{name: path.Base(d.name), size: int64(len(d.b))}
}

func (f *overlayFile) ReadAt(p []byte, off int64) (int, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if off >= int64(len(f.d.b)) {
		return 0, io.EOF
	}
	n := copy(p, f.d.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// errReadOnlyHandle is a write through a handle Open returned.
var errReadOnlyHandle = errors.New("file opened read-only")

func (f *overlayFile) WriteAt(p []byte, off int64) (int, error) {
	if f.readOnly {
		return 0, &fs.PathError{Op: "write", Path: f.d.name, Err: errReadOnlyHandle}
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if end := off + int64(len(p)); end > int64(len(f.d.b)) {
		f.d.b = append(f.d.b, make([]byte, end-int64(len(f.d.b)))...)
	}
	return copy(f.d.b[off:], p), nil
}

func (f *overlayFile) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.pos)
	f.pos += int64(n)
	if n > 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

func (f *overlayFile) Write(p []byte) (int, error) {
	n, err := f.WriteAt(p, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *overlayFile) Truncate(size int64) error {
	if f.readOnly {
		return &fs.PathError{Op: "truncate", Path: f.d.name, Err: errReadOnlyHandle}
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if size <= int64(len(f.d.b)) {
		f.d.b = f.d.b[:size]
	} else {
		f.d.b = append(f.d.b, make([]byte, size-int64(len(f.d.b)))...)
	}
	return nil
}

func (f *overlayFile) Stat() (fs.FileInfo, error) { return f.d.stat(), nil }
func (f *overlayFile) Sync() error                { return nil }
func (f *overlayFile) Close() error               { return nil }
func (f *overlayFile) Preallocate(int64, int64) error {
	return nil
}

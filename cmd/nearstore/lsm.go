package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/bench/lsmbench"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/vfs"
	"github.com/nearstore/nearstore/vfs/overlay"
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
	c.flagsTo(pf, ", with --fs-dir")
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
			v = overlay.New(v)
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

func newBenchLSMCmd(g *globals) *cobra.Command {
	var (
		cfg                 lsmbench.Config
		plotFile, workloads string
		cpuprof             string
		asJSON              bool
		push                lsmPushFlags
		off                 lsmOffloadFlags
	)
	cmd := &cobra.Command{
		Use:   "lsm",
		Short: "kv/lsm vs Pebble: YCSB Load and A-F, db_bench fillrandom/readrandom/scan, on a local directory",
		Long: `lsm loads --records records of --value-size random bytes into kv/lsm and
into Pebble (v2) in turn, each in its own directory under --dir, with the
same memtable size, block cache and threads, and with Pebble's blocks
uncompressed like kv/lsm's (--pebble-compression), and runs the YCSB core
workloads --workloads (default A,C), --ops operations each, in order:

  A  50% reads, 50% updates        D  95% reads of the latest, 5% inserts
  B  95% reads, 5% updates         E  95% scans of 1-100 records, 5% inserts
  C  100% reads                    F  50% reads, 50% read-modify-writes

over a zipfian (theta 0.99, scrambled) or uniform key choice (D: the
latest records, zipfian), and db_bench's workloads:

  fillrandom  --records inserts of new records in random key order
              (write amplification measured as for Load)
  readrandom  reads of existing records chosen uniformly
  scan        seek to an existing record chosen uniformly, read 100

Writes are not synced. It reports throughput,
p50/p99/p99.9 latency, space amplification (the store's bytes on disk over the
live records' bytes), CPU per operation (this process's CPU time over
the phase: clients, flushes, compactions) and, for Load, write
amplification: bytes this process passed to write calls while loading
and settling (flush, then wait for compactions) over the bytes loaded. Each of --repeat
runs uses fresh stores, the engines alternating which goes first; the
report gives each figure's median. Bars: kv/lsm at
least 0.7x Pebble's throughput on Load, A and C, and at most 1.2x its
write amplification on Load. --plot FILE draws the medians: throughput
per workload for both engines, and write amplification on Load.

` + lsmPushHelp + "\n\n" + lsmOffloadHelp,
		Example: `  nearstore bench lsm --records 2000000 --ops 200000 --workloads all --json
  nearstore bench lsm --records 200000 --ops 200000 --plot lsm.png
  nearstore bench lsm --records 200000 --ops 100000 --workloads fillrandom,readrandom,scan
  nearstore bench lsm --mode plain,pushdown,pebble --workloads C,B,D --plot lsm-pushdown.png
  nearstore bench lsm --offload none,compaction,pebble --plot lsm-offload.png`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if push.mode != "" {
				return push.run(cmd, g, lsmPushArgs{records: cfg.Records, valueSize: cfg.ValueSize, threads: cfg.Threads,
					repeat: cfg.Repeat, cache: cfg.Cache, workloads: workloads, cpuprof: cpuprof, asJSON: asJSON, plotFile: plotFile})
			}
			if off.modes != "" {
				return off.run(cmd, g, cfg, workloads, cpuprof, asJSON, plotFile)
			}
			var err error
			if cfg.Workloads, err = lsmbench.ParseWorkloads(workloads); err != nil {
				return usageErrorf("--workloads: %v", err)
			}
			cfg.Logger = benchLogger(cmd, g)
			cfg.Progress = cmd.ErrOrStderr()
			stop, err := startCPUProfile(cpuprof)
			if err != nil {
				return err
			}
			rep, err := lsmbench.Run(cmd.Context(), cfg)
			stop()
			if err != nil {
				return err
			}
			return benchOutput(cmd, asJSON, plotFile, rep,
				func() error { return rep.Print(cmd.OutOrStdout()) },
				func() error { return lsmbench.SavePlot(plotFile, rep) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "directory to hold both stores (default: a temporary one, removed after)")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the stores after the run")
	f.Uint64Var(&cfg.Records, "records", lsmbench.DefaultRecords, "records loaded")
	f.Uint64Var(&cfg.Ops, "ops", lsmbench.DefaultOps, "operations per workload")
	f.StringVar(&workloads, "workloads", "A,C", "workloads run after the load, in order, comma-separated: YCSB letters A-F (or all) and db_bench's fillrandom, readrandom, scan")
	f.IntVar(&cfg.Threads, "threads", lsmbench.DefaultThreads, "client goroutines")
	f.IntVar(&cfg.ValueSize, "value-size", lsmbench.DefaultValueSize, "value bytes")
	f.Int64Var(&cfg.MemTable, "memtable", lsmbench.DefaultMemTable, "memtable size, both engines")
	f.Int64Var(&cfg.Cache, "cache", lsmbench.DefaultCache, "block cache bytes, both engines")
	f.StringVar(&cfg.Distribution, "distribution", "zipfian", "key choice of the workloads but D: zipfian or uniform")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&cpuprof, "cpuprofile", "", "write a CPU profile of this process to this file; samples carry the label engine=kv/lsm or engine=pebble (go tool pprof -tagfocus)")
	f.StringVar(&plotFile, "plot", "", "write throughput per workload and load write amplification, both engines, to this file (.png, .svg or .pdf)")
	f.StringVar(&cfg.PebbleCompression, "pebble-compression", "none",
		"Pebble's block compression: none (as kv/lsm's tables) or snappy (Pebble's default)")
	f.IntVar(&cfg.Repeat, "repeat", lsmbench.DefaultRepeat, "runs; engines alternate going first, and the report gives medians")
	push.add(f)
	off.add(f, &push)
	return cmd
}

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/nearstore/nearstore/bench/fsbench"
	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/volume"
)

// newBenchFSCmd benchmarks file I/O through offloadfs against raw namespace I/O.
func newBenchFSCmd(g *globals) *cobra.Command {
	var (
		repeat, queues      int
		dur, metaDur, slice time.Duration
		fileSize, configs   string
		noMeta              bool
		proc                procFlags
		rf                  reportFlags
	)
	cmd := &cobra.Command{
		Use:   "fs",
		Short: "File I/O through offloadfs against raw namespace I/O, and metadata operations",
		Long: `fs measures what the file system costs on the data path. "nearstore target
serve" runs as its own process with two memory namespaces of the same size;
this process connects over NVMe/TCP, makes an offloadfs on the first and
writes one file of --file-size bytes, and writes the same number of bytes
at the start of the second. Each case then runs its threads of
synchronous I/O (ReadAt/WriteAt) on the file and on the raw region, the
two taking turns in slices of --slice (ABBA order) so that a busy machine
slows both alike, for --duration each, --repeat times; writes overwrite
the file in place. The table gives medians and the ratio of the file's
throughput to the raw namespace's; the bar is 0.9. Metadata operations
(create+sync, create, stat, rename, remove) are measured after, one
goroutine.

Cases are RW:BS:THREADS; the default is {read, write} 1m and {randread,
randwrite} 4k, each at 1 and 32 threads.`,
		Example: `  nearstore bench fs --repeat 3 --plot docs/img/fs.png
  nearstore bench fs --configs randread:4k:32,read:1m:32 --duration 5s --json
  nearstore bench fs --no-meta --server-cpus 1 --client-cpus 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			n, err := volume.ParseSize(fileSize)
			if err != nil {
				return fmt.Errorf("--file-size: %w", err)
			}
			cfg := fsbench.Config{
				FileSize: n, Queues: queues, Duration: dur, Repeat: repeat, Slice: slice,
				MetaDuration: metaDur, SkipMeta: noMeta,
			}
			if strings.TrimSpace(configs) != "" {
				for part := range strings.SplitSeq(configs, ",") {
					c, err := fsbench.ParseCase(part)
					if err != nil {
						return err
					}
					cfg.Cases = append(cfg.Cases, c)
				}
			}
			bp, err := proc.start(cmd, g)
			if err != nil {
				return err
			}
			defer bp.stopProfile()
			cfg.TargetExe, cfg.ServerCPUs, cfg.Logger = bp.exe, proc.serverCPUs, bp.logger
			cfg.Progress = rf.stages(cmd)
			rep, err := fsbench.Run(ctx, cfg)
			if rep != nil {
				rep.Machine.Pinning = bp.pinning
			}
			if err != nil {
				return err
			}
			return printReport(&rf, out, rep, fsbench.WriteTable, fsbench.SavePlot)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fileSize, "file-size", "256MiB", "size of the file, and of the raw region")
	f.StringVar(&configs, "configs", "", "cases as RW:BS:THREADS, comma separated (default: the eight in docs/BENCHMARKS.md)")
	f.DurationVar(&dur, "duration", 4*time.Second, "length of each run (per side)")
	f.IntVar(&repeat, "repeat", 3, "runs per case and side (medians are reported)")
	f.DurationVar(&slice, "slice", 250*time.Millisecond, "the sides take turns in slices of this length within each run")
	f.IntVar(&queues, "queues", 2, "host I/O queues (TCP connections), shared by both sides")
	f.DurationVar(&metaDur, "meta-duration", time.Second, "length of each metadata run")
	f.BoolVar(&noMeta, "no-meta", false, "leave out the metadata operations")
	proc.add(f, "run the target in this process")
	rf.add(f, "the ratios", "print every run and the medians as JSON")
	return cmd
}

package main

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/nearstore/nearstore/bench/lambdabench"
	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// newBenchTPCHCmd runs a TPC-H query's filter and projection as λ reads
// in modes B, K, T and λ.
func newBenchTPCHCmd(g *globals) *cobra.Command {
	var (
		lf    lambdaRunFlags
		sf    float64
		query int
	)
	cmd := &cobra.Command{
		Use:   "tpch",
		Short: "TPC-H Q1, Q6, Q12 or Q14 as λ reads over LINEITEM in modes B, K, T and λ",
		Long: `tpch generates TPC-H's LINEITEM at scale factor --sf (package tpch: 64-byte
rows) into an offloadfs file, then runs the query's filter and projection
function (tpch_q1, tpch_q6, tpch_q12, tpch_q14; for Q1 and Q6 the partial
aggregation too) as λ reads over row-aligned requests in each mode, as
"bench lambda" does. The host finishes every run's answer (tpch.Finish:
128-bit sums, Q12's join with ORDERS and Q14's with PART, grouping and
ordering) and it must equal tpch.Evaluate over a plain host read of the
same file, exactly, or the command fails. The queries use the spec's
validation parameters.`,
		Example: `  nearstore bench tpch --sf 0.1 --query 6 --plot docs/img/tpch-q6.png
  nearstore bench tpch --sf 1 --query 1 --link 10gbit --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := lf.parse()
			if err != nil {
				return err
			}
			cfg := lambdabench.TPCHConfig{
				SF: sf, Query: query, RequestSize: s.requestSize, Warm: lf.warm, WarmRandom: s.warmRandom,
				Modes: s.modes, Repeat: lf.repeat, Depth: lf.depth, Interleave: lf.interleave, Runtime: s.runtime, Seed: lf.seed,
				ProfileEvery: lf.profileEvery, ProfileFirst: lf.profileFirst, ReadAhead: lf.aheadOption(),
				Link: lf.link, TargetExe: s.targetExe, ServerCPUs: lf.proc.serverCPUs, Logger: benchLogger(cmd, g),
			}
			if cfg.Progress = lf.rf.stages(cmd); cfg.Progress != nil {
				bar := newGenBar()
				defer bar.wait()
				cfg.GenProgress = bar.update
			}
			return lf.run(cmd, s, func(ctx context.Context) (*lambdabench.Report, error) { return lambdabench.RunTPCH(ctx, cfg) })
		},
	}
	f := cmd.Flags()
	f.Float64Var(&sf, "sf", lambdabench.DefaultTPCHSF, "scale factor (LINEITEM has about 6 million rows per 1)")
	f.IntVar(&query, "query", lambdabench.DefaultTPCHQuery, "the query: 1, 6, 12 or 14")
	lf.add(f)
	return cmd
}

// genBar shows LINEITEM's generation on stderr once it has taken more
// than a second (a short one shows nothing).
type genBar struct {
	mu       sync.Mutex
	start    time.Time
	finished bool
	p        *mpb.Progress
	bar      *mpb.Bar
}

func newGenBar() *genBar { return &genBar{} }

func (b *genBar) update(done, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	if b.start.IsZero() {
		b.start = time.Now()
	}
	if b.bar == nil {
		if time.Since(b.start) < time.Second || done >= total {
			return
		}
		b.p = mpb.New(mpb.WithOutput(os.Stderr), mpb.WithWidth(40), mpb.WithRefreshRate(200*time.Millisecond))
		b.bar = b.p.AddBar(total,
			mpb.PrependDecorators(decor.Name("LINEITEM ")),
			mpb.AppendDecorators(decor.CountersKibiByte(" % .1f / % .1f"), decor.Percentage(decor.WCSyncSpace)),
		)
	}
	b.bar.SetCurrent(done)
	if done >= total {
		// Done: let it draw its last state before the next message.
		b.p.Wait()
		b.bar, b.p = nil, nil
		b.finished = true
	}
}

// wait lets the bar finish drawing, if there is one.
func (b *genBar) wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		b.bar.SetTotal(-1, true)
		b.p.Wait()
		b.bar = nil
	}
}

package lambdabench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/lambda"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/tpch"
	"github.com/nearstore/nearstore/volume"
)

// `bench tpch`: a TPC-H query's filter and projection (and for Q1 and Q6
// the partial aggregation) as λ reads over the LINEITEM table in an
// offloadfs file, in the same four modes and with the same runs as
// `bench lambda`; the host finishes each run's answer (tpch.Finish: the
// 128-bit sums, Q12's join with ORDERS and Q14's with PART, which the
// generator makes in memory, as tpch.Evaluate does) and it must equal
// tpch.Evaluate over a plain host read of the same file, exactly.

// Defaults of a TPCHConfig.
const (
	DefaultTPCHSF    = 0.1
	DefaultTPCHQuery = 6
)

// TPCHConfig configures RunTPCH.
type TPCHConfig struct {
	// SF is the scale factor (default 0.1: 600 K rows, 38 MB).
	SF float64
	// Query is 1, 6, 12 or 14 (default 6), with the spec's validation
	// parameters.
	Query int
	// RequestSize is each λ read's size (default 1 MiB), a multiple of
	// the 64-byte row up to MaxLambdaRequestSize.
	RequestSize int
	// Warm, WarmRandom, Modes, Repeat, Depth, Interleave, Runtime,
	// ProfileEvery, ProfileFirst, ReadAhead, Link, TargetExe, ServerCPUs,
	// Logger and Progress are as Config's.
	Warm                       float64
	WarmRandom                 bool
	Modes                      []lambda.Mode
	Repeat, Depth, Interleave  int
	Runtime                    sandbox.Kind
	ProfileEvery, ProfileFirst int
	ReadAhead                  int
	Link                       string
	TargetExe, ServerCPUs      string
	Logger                     *slog.Logger
	Progress                   func(stage string)
	// Seed is the generator's (default 1).
	Seed uint64
	// GenProgress, when set, is told how many of LINEITEM's bytes are
	// written so far, of how many.
	GenProgress func(done, total int64)
}

// RunTPCH runs the benchmark.
func RunTPCH(ctx context.Context, cfg TPCHConfig) (_ *Report, err error) {
	if cfg.SF == 0 {
		cfg.SF = DefaultTPCHSF
	}
	if cfg.Query == 0 {
		cfg.Query = DefaultTPCHQuery
	}
	// The settings Config shares get its defaults and checks.
	lc := Config{
		App: "tpch", Size: 1, RequestSize: cfg.RequestSize, Warm: cfg.Warm, WarmRandom: cfg.WarmRandom,
		Modes: cfg.Modes, Repeat: cfg.Repeat, Depth: cfg.Depth, Interleave: cfg.Interleave, Runtime: cfg.Runtime,
		ProfileEvery: cfg.ProfileEvery, ProfileFirst: cfg.ProfileFirst, ReadAhead: cfg.ReadAhead, Seed: cfg.Seed, Logger: cfg.Logger, Progress: cfg.Progress,
		Link: cfg.Link, TargetExe: cfg.TargetExe, ServerCPUs: cfg.ServerCPUs,
	}
	if err := lc.setDefaults(); err != nil {
		return nil, err
	}
	q, err := tpch.Validation(cfg.Query)
	if err != nil {
		return nil, err
	}
	g, err := tpch.NewGenerator(cfg.SF, lc.Seed)
	if err != nil {
		return nil, err
	}
	rows := g.Rows()
	size := rows * tpch.RowSize
	reqs, err := planLambdaRequests(size, lc.RequestSize, tpch.RowSize)
	if err != nil {
		return nil, err
	}
	copies := fileCopies(lc.Interleave, lc.Modes)
	e, rep, fn, err := lc.start(ctx, (copies*(size+size/8)+96<<20+lambdaBlock-1)/lambdaBlock*lambdaBlock, copies*size+64<<20, q.Function())
	if err != nil {
		return nil, err
	}
	defer e.Close()
	defer func() { err = e.targetFailure(err) }()
	rep.App, rep.Function = q.Function(), q.Function()
	rep.SF, rep.Query, rep.Rows = cfg.SF, q.String(), rows
	rep.Size, rep.RequestSize, rep.Requests = size, lc.RequestSize, len(reqs)
	harness.Stage(lc.Progress, "generating LINEITEM at SF %g (%d rows, %s)", cfg.SF, rows, volume.FormatSize(size))
	f, err := e.fsys.Create("lineitem")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	pw := &progressWriterAt{w: f, total: size, report: cfg.GenProgress}
	n, err := g.WriteLineitemAt(pw, 0)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if n != rows {
		return nil, fmt.Errorf("bench: wrote %d LINEITEM rows, want %d", n, rows)
	}
	if err := e.fsys.SyncRemote(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	tables := g.Tables()
	harness.Stage(lc.Progress, "evaluating %v on the host over a plain read of the file", q)
	want, err := tpch.Evaluate(q, tables, io.NewSectionReader(f, 0, size))
	if err != nil {
		return nil, fmt.Errorf("bench: tpch.Evaluate: %w", err)
	}
	rep.Answer = want.String()
	params, err := q.Params().AppendBinary(nil)
	if err != nil {
		return nil, err
	}
	w := &lambdaWork{
		file: f, fn: fn, reqs: reqs, params: params, bytes: size, reference: rep.Answer,
		outCap: func(n int) int { return q.OutCap(tpch.ParamsSize + n) },
		check: func(outs [][]byte) (string, error) {
			got, err := tpch.Finish(q, tables, outs...)
			if err != nil {
				return "", fmt.Errorf("tpch.Finish: %w", err)
			}
			if !reflect.DeepEqual(got, want) {
				return got.String(), fmt.Errorf("the finished answer differs from tpch.Evaluate's:\n%s\nwant:\n%s", got.String(), want.String())
			}
			return got.String(), nil
		},
	}
	err = e.runModes(ctx, rep, w, lc.runOpts())
	return rep, err
}

// progressWriterAt counts the bytes written through it for a progress
// display.
type progressWriterAt struct {
	w      *offloadfs.File
	total  int64
	done   atomic.Int64
	report func(done, total int64)
}

func (p *progressWriterAt) WriteAt(b []byte, off int64) (int, error) {
	n, err := p.w.WriteAt(b, off)
	d := p.done.Add(int64(n))
	if p.report != nil {
		p.report(d, p.total)
	}
	return n, err
}

// tpchAnswerLines indents a multi-line answer for the text report.
func tpchAnswerLines(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

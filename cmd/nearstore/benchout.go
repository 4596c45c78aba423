package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// reportFlags are the output flags every bench command has (--plot, --json,
// --quiet) and the one way a bench command prints what it measured.
type reportFlags struct {
	plotFile      string
	asJSON, quiet bool
}

// add registers the flags; plotWhat says what the plot shows, jsonWhat
// what --json prints.
func (r *reportFlags) add(f *pflag.FlagSet, plotWhat, jsonWhat string) {
	f.StringVar(&r.plotFile, "plot", "", "write "+plotWhat+" to this file (.png, .svg or .pdf)")
	f.BoolVar(&r.asJSON, "json", false, jsonWhat)
	f.BoolVar(&r.quiet, "quiet", false, "no progress on stderr")
}

// stages returns the function a bench calls with each stage it starts,
// telling it on stderr; nil with --quiet.
func (r *reportFlags) stages(cmd *cobra.Command) func(stage string) {
	if r.quiet {
		return nil
	}
	stderr := cmd.ErrOrStderr()
	return func(stage string) { fmt.Fprintf(stderr, "… %s\n", stage) }
}

// printReport prints rep as JSON (--json) or as its table, then saves its
// plot (--plot) and, under the table, says where.
func printReport[R any](r *reportFlags, out io.Writer, rep R, table func(io.Writer, R) error, plot func(string, R) error) error {
	if r.asJSON {
		if err := writeJSON(out, rep); err != nil {
			return err
		}
	} else if err := table(out, rep); err != nil {
		return err
	}
	if r.plotFile == "" {
		return nil
	}
	if err := plot(r.plotFile, rep); err != nil {
		return err
	}
	if !r.asJSON {
		fmt.Fprintf(out, "\nplot: %s\n", r.plotFile)
	}
	return nil
}

// printPartial is printReport for a run that may have failed part way
// (runErr): such a run prints what it measured, saves no plot, and fails
// with runErr.
func printPartial[R any](r *reportFlags, out io.Writer, rep R, runErr error, table func(io.Writer, R) error, plot func(string, R) error) error {
	if runErr == nil {
		return printReport(r, out, rep, table, plot)
	}
	noPlot := *r
	noPlot.plotFile = ""
	return errors.Join(runErr, printReport(&noPlot, out, rep, table, plot))
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// benchOutput is printReport for a caller that holds its own flags and
// closures over its report.
func benchOutput(cmd *cobra.Command, asJSON bool, plotFile string, rep any, table, plot func() error) error {
	rf := reportFlags{plotFile: plotFile, asJSON: asJSON}
	return printReport(&rf, cmd.OutOrStdout(), rep,
		func(io.Writer, any) error { return table() }, func(string, any) error { return plot() })
}

// rateBar returns a bar showing one run's progress on stderr: elapsed
// time against the run's length and, when the run reports operations done
// (ops ≥ 0), their live rate in unit per second.
func rateBar(unit string) func(name string, d time.Duration) (update func(el time.Duration, ops int64), end func()) {
	return func(name string, d time.Duration) (func(time.Duration, int64), func()) {
		p := mpb.New(mpb.WithOutput(os.Stderr), mpb.WithWidth(30), mpb.WithRefreshRate(200*time.Millisecond))
		total := d.Milliseconds()
		var rate string
		bar := p.AddBar(total,
			mpb.PrependDecorators(decor.Name(name+" ")),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return rate })),
		)
		var lastOps int64
		var lastT time.Duration
		update := func(el time.Duration, ops int64) {
			if dt := el - lastT; dt > 0 && ops >= 0 {
				rate = fmt.Sprintf(" %8.0f "+unit, float64(ops-lastOps)/dt.Seconds())
			}
			lastOps, lastT = ops, el
			bar.SetCurrent(min(el.Milliseconds(), total))
		}
		end := func() {
			bar.SetTotal(total, true)
			p.Wait()
		}
		return update, end
	}
}

// loadBar returns a bar showing a tree's loading on stderr, keys loaded
// of the total, labelled name; it finishes when all are loaded.
func loadBar(name string) func(done, total int64) { return countBar(name, "keys") }

// countBar returns a bar showing on stderr how many of a total of units
// are done, labelled name; it finishes when all are.
func countBar(name, unit string) func(done, total int64) {
	var p *mpb.Progress
	var bar *mpb.Bar
	return func(done, total int64) {
		if p == nil {
			p = mpb.New(mpb.WithOutput(os.Stderr), mpb.WithWidth(40), mpb.WithRefreshRate(200*time.Millisecond))
			bar = p.AddBar(total,
				mpb.PrependDecorators(decor.Name(name), decor.CountersNoUnit("%d / %d "+unit)),
				mpb.AppendDecorators(decor.Percentage()))
		}
		bar.SetCurrent(done)
		if done >= total {
			bar.SetTotal(total, true)
			p.Wait()
			p = nil
		}
	}
}

// Package report holds what every experiment's report shares: the
// description of the machine it ran on, the bars an issue sets and how a
// report states them, medians of repeated runs, latencies in µs, printing
// a table, and saving a chart in the format a file name asks for.
package report

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
)

// Machine describes where a benchmark ran.
type Machine struct {
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPUModel   string `json:"cpu_model"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	// Pinning says how processes were pinned to CPUs, if at all.
	Pinning string `json:"pinning,omitempty"`
}

// DescribeMachine reads the CPU count and model, and the kernel release.
func DescribeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// Median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// Micros states d in microseconds, the unit reports give latencies in.
func Micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// Bar is one of an issue's bars, as a report states it.
type Bar struct {
	What string  `json:"what"`
	Want string  `json:"want"`
	Got  float64 `json:"got"`
	Met  bool    `json:"met"`
}

// WriteBars prints one line per bar: what it measures, what it wants, what
// a run got, and whether it was met.
func WriteBars(w io.Writer, bars []Bar) error {
	for _, b := range bars {
		verdict := "met"
		if !b.Met {
			verdict = "MISSED"
		}
		if _, err := fmt.Fprintf(w, "\nbar: %s: want %s, got %.3f: %s", b.What, b.Want, b.Got, verdict); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}

// WriteTableBars flushes tw, a table being printed to w, then prints
// bars under it (WriteBars): how a report's table ends.
func WriteTableBars(w io.Writer, tw *tabwriter.Writer, bars []Bar) error {
	if err := tw.Flush(); err != nil {
		return err
	}
	return WriteBars(w, bars)
}

// KiloTicks labels the IOPS axis in thousands ("40k").
type KiloTicks struct{}

// Ticks implements plot.Ticker.
func (KiloTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		switch {
		case ts[i].Label == "":
		case ts[i].Value == 0:
			ts[i].Label = "0"
		default:
			ts[i].Label = fmt.Sprintf("%gk", ts[i].Value/1000)
		}
	}
	return ts
}

// SaveByExtension creates path and has write render into it in the format
// the path's extension names ("png", "svg", "pdf"). A failed render
// leaves no partial file behind.
func SaveByExtension(path string, write func(w io.Writer, format string) error) error {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	if format == "" {
		return fmt.Errorf("bench: plot %s: no extension to tell the format", path)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f, format); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// MedianOf is the median of f over xs.
func MedianOf[T any](xs []T, f func(T) float64) float64 {
	vs := make([]float64, len(xs))
	for i, x := range xs {
		vs[i] = f(x)
	}
	return Median(vs)
}

// TableWriter keeps the first write error, so a table can be printed
// without checking every line.
type TableWriter struct {
	W   io.Writer
	Err error // the first write error
}

// Printf prints to W unless a write has failed.
func (e *TableWriter) Printf(format string, args ...any) {
	if e.Err == nil {
		_, e.Err = fmt.Fprintf(e.W, format, args...)
	}
}

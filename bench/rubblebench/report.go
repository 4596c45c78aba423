package rubblebench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nearstore/nearstore/bench/report"
	"github.com/nearstore/nearstore/bench/ycsb"
)

// CPUBar is the bar: at R = 3 on YCSB A, RubbleDB's CPU time per
// operation across the group at least this fraction below the
// baseline's.
const CPUBar = 0.30

// ModeReport is a mode as the run found it.
type ModeReport struct {
	Mode
	// Available is false if the binary refused the mode's flags;
	// Unavailable then says how.
	Available   bool   `json:"available"`
	Unavailable string `json:"unavailable,omitempty"`
}

// ConfigReport is the run's configuration.
type ConfigReport struct {
	Replicas     []int    `json:"replicas"`
	Groups       int      `json:"groups"`
	Records      int      `json:"records"`
	Ops          int      `json:"ops"`
	ValueSize    int      `json:"value_size"`
	Workloads    []string `json:"workloads"`
	Threads      int      `json:"threads"`
	Repeat       int      `json:"repeat"`
	MemTableSize int      `json:"memtable_size"`
	LeaseTTL     int      `json:"lease_ttl_s"`
}

// Report is a whole run.
type Report struct {
	Machine report.Machine `json:"machine"`
	// LoadAvg is /proc/loadavg when the run started and when it ended.
	LoadAvg [2]string    `json:"loadavg"`
	Config  ConfigReport `json:"config"`
	Modes   []ModeReport `json:"modes"`
	// Notes say how each figure was measured.
	Notes []string `json:"notes"`
	// Runs are every phase of every run; Medians the medians per mode, R
	// and workload.
	Runs    []Phase      `json:"runs"`
	Medians []Phase      `json:"medians"`
	Bars    []report.Bar `json:"bars"`
	// Retried are the runs run again because a chain changed during
	// them, and why; their figures were dropped.
	Retried []string `json:"retried,omitempty"`
}

// The notes every report carries.
var notes = []string{
	"the nodes, etcd and the client share this machine's CPUs: CPU time per operation is the figure to compare; throughput follows the machine's load",
	"CPU: user + system time of each node process (/proc/PID/stat, 10 ms ticks) over the phase; primary = every group's chain head in etcd, secondaries = the other members",
	"network: TCP bytes sent (acknowledged) plus received by each node process's sockets, from the kernel's per-socket counters (sock_diag tcp_info); loopback, so a byte between two nodes counts at both",
	"compaction CPU: n/a, the node exposes no CPU counter for compactions; compactions are counted from kv/lsm's \"compacted\" debug lines on each node's stderr (nodes run with --log-level debug), with their bytes and wall time",
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func newReport(cfg *Config) *Report {
	r := &Report{Machine: report.DescribeMachine(), Notes: notes}
	r.LoadAvg[0] = loadAvg()
	r.Config = ConfigReport{Replicas: cfg.Replicas, Groups: cfg.Groups, Records: cfg.Records, Ops: cfg.Ops, ValueSize: cfg.ValueSize,
		Threads: cfg.Threads, Repeat: cfg.Repeat, MemTableSize: cfg.MemTableSize, LeaseTTL: cfg.LeaseTTL}
	for _, w := range cfg.Workloads {
		r.Config.Workloads = append(r.Config.Workloads, w.Name)
	}
	for _, m := range cfg.Modes {
		r.Modes = append(r.Modes, ModeReport{Mode: m, Available: true})
	}
	return r
}

func (r *Report) mode(name string) *ModeReport {
	for i := range r.Modes {
		if r.Modes[i].Name == name {
			return &r.Modes[i]
		}
	}
	return nil
}

// finish computes the medians and the bars.
func (r *Report) finish() {
	r.LoadAvg[1] = loadAvg()
	r.Medians = medians(r.Runs)
	r.Bars = r.bars()
}

func medians(runs []Phase) []Phase {
	type key struct {
		mode, wl string
		r        int
	}
	var keys []key
	groups := map[key][]Phase{}
	for _, p := range runs {
		k := key{p.Mode, p.Workload, p.Replicas}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], p)
	}
	var out []Phase
	for _, k := range keys {
		ps := groups[k]
		med := func(f func(Phase) float64) float64 { return report.MedianOf(ps, f) }
		roles := func(f func(Phase) Roles) Roles {
			return Roles{
				Primary:     med(func(p Phase) float64 { return f(p).Primary }),
				Secondary:   med(func(p Phase) float64 { return f(p).Secondary }),
				Secondaries: med(func(p Phase) float64 { return f(p).Secondaries }),
				Total:       med(func(p Phase) float64 { return f(p).Total }),
			}
		}
		m := Phase{Mode: k.mode, Workload: k.wl, Replicas: k.r, Ops: ps[0].Ops,
			Seconds: med(func(p Phase) float64 { return p.Seconds }), OpsPerSec: med(func(p Phase) float64 { return p.OpsPerSec }),
			P50us: med(func(p Phase) float64 { return p.P50us }), P99us: med(func(p Phase) float64 { return p.P99us }),
			CPUus: roles(func(p Phase) Roles { return p.CPUus }), NetBytes: roles(func(p Phase) Roles { return p.NetBytes }),
			Compactions: roles(func(p Phase) Roles { return p.Compactions }), CompactionMs: roles(func(p Phase) Roles { return p.CompactionMs }),
			WritesPerShip: roles(func(p Phase) Roles { return p.WritesPerShip })}
		for _, p := range ps {
			m.MixedRoles = m.MixedRoles || p.MixedRoles
			m.ClosedSockets += p.ClosedSockets
		}
		out = append(out, m)
	}
	return out
}

// Median returns the median phase of mode at R replicas on workload.
func (r *Report) Median(mode string, replicas int, workload string) (Phase, bool) {
	i := slices.IndexFunc(r.Medians, func(p Phase) bool {
		return p.Mode == mode && p.Replicas == replicas && p.Workload == workload
	})
	if i < 0 {
		return Phase{}, false
	}
	return r.Medians[i], true
}

func (r *Report) unavailable(mode string) string {
	if m := r.mode(mode); m != nil && !m.Available {
		return fmt.Sprintf(" (not measured: %s mode unavailable in this build)", mode)
	}
	return " (not measured)"
}

func (r *Report) bars() []report.Bar {
	cpu := report.Bar{What: fmt.Sprintf("R = 3, YCSB %s: total CPU time per operation across the group, 1 - rubble ÷ baseline (medians)", ycsb.A.Name),
		Want: fmt.Sprintf(">= %.2f", CPUBar)}
	b, okB := r.Median(Baseline, 3, ycsb.A.Name)
	rb, okR := r.Median(Rubble, 3, ycsb.A.Name)
	switch {
	case !okR:
		cpu.What += r.unavailable(Rubble)
	case !okB:
		cpu.What += r.unavailable(Baseline)
	case b.CPUus.Total > 0:
		cpu.Got = 1 - rb.CPUus.Total/b.CPUus.Total
		cpu.Met = cpu.Got >= CPUBar
	}
	comp := report.Bar{What: "secondaries' compactions in rubble mode, every R and workload (kv/lsm's \"compacted\" lines; none means no compaction CPU)",
		Want: "= 0, the primary's > 0"}
	measured := false
	var primary float64
	for _, p := range r.Runs {
		if p.Mode == Rubble {
			measured = true
			comp.Got += p.Compactions.Secondaries
			primary += p.Compactions.Primary
		}
	}
	if measured {
		// Without the primary's compactions counted, zero on the
		// secondaries would prove nothing (no lines, or none parsed).
		comp.What += fmt.Sprintf("; the primaries ran %.0f", primary)
		comp.Met = comp.Got == 0 && primary > 0
	} else {
		comp.What += r.unavailable(Rubble)
	}
	return []report.Bar{cpu, comp}
}

// WriteTable prints the medians, the rubble ÷ baseline ratios, how the
// figures were measured and the bars.
func WriteTable(w io.Writer, r *Report) error {
	t := &report.TableWriter{W: w}
	c := r.Config
	t.Printf("RubbleDB against chain replication: R = %s, %d group(s), %d records of %d B, %d ops per workload, %d threads, memtable %d KiB; medians of %d interleaved runs\n",
		joinInts(c.Replicas), c.Groups, c.Records, c.ValueSize, c.Ops, c.Threads, c.MemTableSize>>10, c.Repeat)
	t.Printf("machine: %d CPUs (%s), load average %s at the start, %s at the end\n", r.Machine.CPUs, r.Machine.CPUModel, r.LoadAvg[0], r.LoadAvg[1])
	t.Printf("NOTE: the nodes share this machine's %d CPUs with each other, etcd and the client, so CPU time per operation is the figure to compare; throughput follows the machine's load.\n", r.Machine.CPUs)
	for _, m := range r.Modes {
		state := ""
		if !m.Available {
			state = "  UNAVAILABLE: " + m.Unavailable
		}
		t.Printf("mode %s: node serve %s (%s)%s\n", m.Name, strings.Join(m.NodeArgs(), " "), m.About, state)
	}
	t.Printf("\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	tt := &report.TableWriter{W: tw}
	tt.Printf("R\twork\tmode\tops/s\tp50 µs\tp99 µs\tCPU µs/op primary\tper secondary\ttotal\tcompactions P/S\tcompaction ms P/S\tnet B/op P/S\t\n")
	for _, p := range r.Medians {
		mixed := ""
		if p.MixedRoles {
			mixed = " (mixed roles)"
		}
		tt.Printf("%d\t%s\t%s%s\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%.0f/%.0f\t%.0f/%.0f\t%.0f/%.0f\t\n", p.Replicas, p.Workload, p.Mode, mixed,
			p.OpsPerSec, p.P50us, p.P99us, p.CPUus.Primary, p.CPUus.Secondary, p.CPUus.Total,
			p.Compactions.Primary, p.Compactions.Secondaries, p.CompactionMs.Primary, p.CompactionMs.Secondaries,
			p.NetBytes.Primary, p.NetBytes.Secondaries)
	}
	if t.Err != nil || tt.Err != nil {
		return errors.Join(t.Err, tt.Err)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var ratios []string
	for _, b := range r.Medians {
		if b.Mode != Baseline {
			continue
		}
		if rb, ok := r.Median(Rubble, b.Replicas, b.Workload); ok && b.CPUus.Total > 0 && b.OpsPerSec > 0 {
			ratios = append(ratios, fmt.Sprintf("R=%d %-4s CPU/op %.2f×  throughput %.2f×", b.Replicas, b.Workload, rb.CPUus.Total/b.CPUus.Total, rb.OpsPerSec/b.OpsPerSec))
		}
	}
	if len(ratios) > 0 {
		t.Printf("\nrubble ÷ baseline (medians):\n  %s\n", strings.Join(ratios, "\n  "))
	}
	for _, x := range r.Retried {
		t.Printf("\nrun again (figures dropped): %s", x)
	}
	t.Printf("\nP = primary, S = the secondaries together.\n")
	for _, n := range r.Notes {
		t.Printf("- %s\n", n)
	}
	if t.Err != nil {
		return t.Err
	}
	return report.WriteBars(w, r.Bars)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

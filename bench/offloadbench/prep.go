package offloadbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/link"
	"github.com/nearstore/nearstore/bench/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/nearstore/nearstore/offload/prep"
)

// PrepBar is the bar for OffloadPrep: with the host limited to
// one core, offloading to the storage node (or splitting) gives at least
// this many times the host-only images per second.
const PrepBar = 1.5

// PrepConfig configures the OffloadPrep benchmark.
type PrepConfig struct {
	Process
	// Images is the size of the synthetic set; Size the output side.
	Images, Size int
	// Batch is images per offloaded task; Repeat runs per mode.
	Batch, Repeat int
	// HostProcs limits this process (the host) to that many Ps (1).
	HostProcs int
	// Modes to run: host, target, peer, split (default all).
	Modes []string
	// Link is the emulated link's rate between the host (and the peer)
	// and the target ("10gbit"; "" for loopback), as bench link makes it.
	Link string
}

// PrepRun is one run of one mode.
type PrepRun struct {
	Mode         string  `json:"mode"`
	Seconds      float64 `json:"seconds"`
	ImagesPerSec float64 `json:"images_per_second"`
	PrepCPU
	Ran map[string]int `json:"ran"`
}

// PrepCPU is CPU time per image, in milliseconds, of each process: this
// one (the host), the target (its engine included) and the peer. Their
// sum against the host-only run's says what offloading costs in all;
// the host's share says what it takes off the host.
type PrepCPU struct {
	Host   float64 `json:"host_cpu_ms_per_image"`
	Target float64 `json:"target_cpu_ms_per_image"`
	Peer   float64 `json:"peer_cpu_ms_per_image"`
}

// Total is the CPU per image of all three processes.
func (c PrepCPU) Total() float64 { return c.Host + c.Target + c.Peer }

// PrepMode is a mode's medians.
type PrepMode struct {
	Mode         string  `json:"mode"`
	ImagesPerSec float64 `json:"images_per_second"`
	PrepCPU
	Speedup float64 `json:"speedup_over_host"`
}

// PrepReport is the benchmark's result.
type PrepReport struct {
	Machine   report.Machine `json:"machine"`
	Link      string         `json:"link"`
	HostProcs int            `json:"host_procs"`
	Images    int            `json:"images"`
	Size      int            `json:"size"`
	Batch     int            `json:"batch"`
	Repeat    int            `json:"repeat"`
	Runs      []PrepRun      `json:"runs"`
	Modes     []PrepMode     `json:"modes"`
	Bars      []report.Bar   `json:"bars"`
}

// RunPrep runs the OffloadPrep benchmark: a synthetic set in an offloadfs
// on a target process with an in-target engine and a peer engine
// process; this process, the host, limited to HostProcs Ps, preprocesses
// the whole set in each mode, the modes taking turns (ABCD DCBA ...).
func RunPrep(ctx context.Context, cfg PrepConfig) (*PrepReport, error) {
	harness.Default(&cfg.Images, 400)
	harness.Default(&cfg.Size, 224)
	harness.Default(&cfg.Batch, 8)
	harness.Default(&cfg.Repeat, 3)
	harness.Default(&cfg.HostProcs, 1)
	if len(cfg.Modes) == 0 {
		cfg.Modes = []string{"host", "target", "peer", "split"}
	}
	peer := slices.Contains(cfg.Modes, "peer")
	link, err := link.Open(ctx, cfg.Link, cfg.Logger)
	if err != nil {
		return nil, err
	}
	defer link.Close()
	env, err := startOffloadEnv(ctx, cfg.Process, imageSetVolume(cfg.Images), []string{"--policy=none"}, peer, link)
	if err != nil {
		return nil, err
	}
	defer env.Close()
	harness.Stage(cfg.Progress, "writing %d synthetic images", cfg.Images)
	names, err := env.writeImages(ctx, cfg.Images)
	if err != nil {
		return nil, err
	}
	engines := map[string][]prep.Engine{"host": nil}
	tc, err := env.client(env.engineAddr, "bench", nil)
	if err != nil {
		return nil, err
	}
	engines["target"] = []prep.Engine{{Name: "target", Peer: tc}}
	engines["split"] = engines["target"]
	if peer {
		pc, err := env.client(env.peerAddr, "bench", nil)
		if err != nil {
			return nil, err
		}
		engines["peer"] = []prep.Engine{{Name: "peer", Peer: pc}}
	}
	for _, m := range cfg.Modes {
		if _, ok := engines[m]; !ok {
			return nil, fmt.Errorf("bench: prep mode %q: want host, target, peer or split", m)
		}
	}
	prev := runtime.GOMAXPROCS(cfg.HostProcs)
	defer runtime.GOMAXPROCS(prev)
	rep := &PrepReport{
		Machine: report.DescribeMachine(), Link: link.String(), HostProcs: cfg.HostProcs, Images: len(names),
		Size: cfg.Size, Batch: cfg.Batch, Repeat: cfg.Repeat,
	}
	rep.Machine.Pinning = cfg.Pinning
	r := &prep.Runner{FS: env.fsys, Options: prep.Options{Size: cfg.Size}, Seed: 1, Batch: cfg.Batch}
	for i := range cfg.Repeat {
		order := slices.Clone(cfg.Modes)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range order {
			harness.Stage(cfg.Progress, "run %d/%d: %s", i+1, cfg.Repeat, m)
			h0, t0c, p0 := env.cpuTimes()
			t0 := time.Now()
			st, err := r.Run(ctx, names, 0, m == "host" || m == "split", engines[m], func(uint64, []float32) {})
			if err != nil {
				return nil, fmt.Errorf("bench: prep %s: %w", m, err)
			}
			secs := time.Since(t0).Seconds()
			h1, t1c, p1 := env.cpuTimes()
			perImage := func(d time.Duration) float64 {
				return float64(d) / float64(time.Millisecond) / float64(len(names))
			}
			rep.Runs = append(rep.Runs, PrepRun{
				Mode: m, Seconds: secs, ImagesPerSec: float64(len(names)) / secs,
				PrepCPU: PrepCPU{Host: perImage(h1 - h0), Target: perImage(t1c - t0c), Peer: perImage(p1 - p0)},
				Ran:     st.Images,
			})
		}
	}
	var hostRate float64
	for _, m := range cfg.Modes {
		var rates, host, target, peer []float64
		for _, run := range rep.Runs {
			if run.Mode == m {
				rates = append(rates, run.ImagesPerSec)
				host, target, peer = append(host, run.Host), append(target, run.Target), append(peer, run.Peer)
			}
		}
		pm := PrepMode{Mode: m, ImagesPerSec: report.Median(rates),
			PrepCPU: PrepCPU{Host: report.Median(host), Target: report.Median(target), Peer: report.Median(peer)}}
		if m == "host" {
			hostRate = pm.ImagesPerSec
		}
		rep.Modes = append(rep.Modes, pm)
	}
	best := 0.0
	for i := range rep.Modes {
		if hostRate > 0 {
			rep.Modes[i].Speedup = rep.Modes[i].ImagesPerSec / hostRate
		}
		if m := rep.Modes[i].Mode; m == "target" || m == "split" {
			best = max(best, rep.Modes[i].Speedup)
		}
	}
	if hostRate > 0 && best > 0 {
		rep.Bars = append(rep.Bars, report.Bar{
			What: fmt.Sprintf("images/s offloaded to the storage node (best of target, split) ÷ host-only, host on %d core", cfg.HostProcs),
			Want: fmt.Sprintf(">= %.1f", PrepBar), Got: best, Met: best >= PrepBar,
		})
	}
	return rep, nil
}

// WritePrepTable prints the medians and the bar.
func WritePrepTable(w io.Writer, r *PrepReport) error {
	fmt.Fprintf(w, "OffloadPrep: %d images to %d×%d tensors, batches of %d, host on %d core(s), %s; medians of %d runs\n\n",
		r.Images, r.Size, r.Size, r.Batch, r.HostProcs, r.Link, r.Repeat)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\timages/s\t× host\tCPU ms/image: host\ttarget\tpeer\tall\t")
	for _, m := range r.Modes {
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", m.Mode, m.ImagesPerSec, m.Speedup, m.Host, m.Target, m.Peer, m.Total())
	}
	return report.WriteTableBars(w, tw, r.Bars)
}

// SavePrepPlot draws images/s per mode as bars, with host CPU per image
// in the labels, to path (.png, .svg, .pdf).
func SavePrepPlot(path string, r *PrepReport) error {
	if r == nil || len(r.Modes) == 0 {
		return errors.New("bench: nothing to plot")
	}
	return report.SavePlot(path, 7*vg.Inch, 4.5*vg.Inch, func() (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("OffloadPrep: images/s by placement (host on %d core, %s, medians of %d)\nlabels: images/s, host CPU ms per image (all processes')", r.HostProcs, r.Link, r.Repeat)
		p.Y.Label.Text = "images per second"
		p.Y.Min = 0
		vs := make(plotter.Values, len(r.Modes))
		var names []string
		xy := plotter.XYLabels{}
		top := 0.0
		for _, m := range r.Modes {
			top = max(top, m.ImagesPerSec)
		}
		for i, m := range r.Modes {
			vs[i] = m.ImagesPerSec
			names = append(names, m.Mode)
			xy.XYs = append(xy.XYs, plotter.XY{X: float64(i), Y: m.ImagesPerSec + top*0.03})
			xy.Labels = append(xy.Labels, fmt.Sprintf("%.1f\n%.2f (%.2f) ms", m.ImagesPerSec, m.Host, m.Total()))
		}
		bars, err := report.Bars(vs, vg.Points(36), report.Blue)
		if err != nil {
			return nil, err
		}
		p.Add(bars)
		if len(r.Modes) > 0 && r.Modes[0].Mode == "host" {
			line, err := report.GoalLine(r.Modes[0].ImagesPerSec*PrepBar, len(r.Modes), report.Red)
			if err != nil {
				return nil, err
			}
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("bar (%.1f× host)", PrepBar), line)
		}
		l, err := report.CenteredLabels(xy, vg.Points(8))
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.NominalX(names...)
		p.Y.Max = top * 1.6
		p.Legend.Top = true
		return p, nil
	})
}

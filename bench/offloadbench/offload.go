// Package offloadbench holds the offload experiments: bench offload (how
// the target admits many clients' offloaded batches, and how fairly) and
// bench prep (image preparation on the host or offloaded to the target,
// over loopback or an emulated link). Both run the target and an optional
// peer engine as child processes.
package offloadbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/bench/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offload/prep"
	"github.com/nearstore/nearstore/offloadfs"
)

// OffloadJainBar is the fairness bar under the token policy:
// two equal clients within 10% of each other.
const OffloadJainBar = 0.99

// Config configures the admission benchmark.
type Config struct {
	Process
	// Clients offload at once, for Duration, under each of Policies
	// (none, cpu, tokens).
	Clients  int
	Duration time.Duration
	Policies []string
	// CPUThreshold (of the target process's share of the machine) and
	// Tokens configure the policies.
	CPUThreshold float64
	Tokens       int
	// Images, Size and Batch shape the tasks: OffloadPrep batches.
	Images, Size, Batch int
}

// OffloadClient is one client's count of tasks.
type OffloadClient struct {
	Client string `json:"client"`
	Engine int    `json:"on_engine"`
	Local  int    `json:"local"`
}

// OffloadPolicy is one policy's run.
type OffloadPolicy struct {
	Policy  string          `json:"policy"`
	Clients []OffloadClient `json:"clients"`
	// Jain is Jain's index over the tasks each client ran on the engine.
	Jain float64 `json:"jain_engine"`
	// TargetCPU is the target process's share of the machine, sampled
	// every 200ms during the run: median, 90th percentile, maximum.
	TargetCPU    [3]float64 `json:"target_cpu_median_p90_max"`
	Threshold    float64    `json:"cpu_threshold,omitempty"`
	TasksPerSec  float64    `json:"tasks_per_second"`
	AllCompleted bool       `json:"all_completed"`
}

// Report is the benchmark's result.
type Report struct {
	Machine  report.Machine  `json:"machine"`
	Clients  int             `json:"clients"`
	Seconds  float64         `json:"seconds"`
	Tokens   int             `json:"tokens"`
	Policies []OffloadPolicy `json:"policies"`
	Bars     []report.Bar    `json:"bars"`
}

// Run runs Clients clients offloading OffloadPrep batches at once
// to the storage node's engine (target serve --offload, its own process)
// under each policy; a task the engine turns away runs on its client.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	harness.Default(&cfg.Clients, 2)
	harness.Default(&cfg.Duration, 10*time.Second)
	if len(cfg.Policies) == 0 {
		cfg.Policies = []string{"none", "cpu", "tokens"}
	}
	harness.Default(&cfg.CPUThreshold, 0.5)
	harness.Default(&cfg.Tokens, 2)
	harness.Default(&cfg.Images, 32)
	harness.Default(&cfg.Size, 128)
	harness.Default(&cfg.Batch, 4)
	rep := &Report{Machine: report.DescribeMachine(), Clients: cfg.Clients, Seconds: cfg.Duration.Seconds(), Tokens: cfg.Tokens}
	rep.Machine.Pinning = cfg.Pinning
	for _, pol := range cfg.Policies {
		if _, err := offload.ParsePolicy(pol); err != nil {
			return nil, err
		}
		harness.Stage(cfg.Progress, "%d clients under policy %s for %v", cfg.Clients, pol, cfg.Duration)
		r, err := runOffloadPolicy(ctx, cfg, pol)
		if err != nil {
			return nil, fmt.Errorf("bench: offload, policy %s: %w", pol, err)
		}
		rep.Policies = append(rep.Policies, *r)
		switch pol {
		case "tokens":
			rep.Bars = append(rep.Bars, report.Bar{
				What: fmt.Sprintf("tokens: Jain's index over %d clients' tasks on the engine", cfg.Clients),
				Want: fmt.Sprintf(">= %.2f", OffloadJainBar), Got: r.Jain, Met: r.Jain >= OffloadJainBar && r.AllCompleted,
			})
		case "cpu":
			rep.Bars = append(rep.Bars, report.Bar{
				What: "cpu: the target's median CPU share while every task completes (rejected ones on their clients)",
				Want: fmt.Sprintf("<= %.2f", cfg.CPUThreshold), Got: r.TargetCPU[0], Met: r.TargetCPU[0] <= cfg.CPUThreshold && r.AllCompleted,
			})
		}
	}
	return rep, nil
}

func runOffloadPolicy(ctx context.Context, cfg Config, pol string) (*OffloadPolicy, error) {
	args := []string{"--policy=" + pol, "--cpu-of=process", "--token-ttl=2s",
		"--cpu-threshold=" + strconv.FormatFloat(cfg.CPUThreshold, 'f', -1, 64), "--tokens=" + strconv.Itoa(cfg.Tokens)}
	env, err := startOffloadEnv(ctx, cfg.Process, imageSetVolume(cfg.Images), args, false, nil)
	if err != nil {
		return nil, err
	}
	defer env.Close()
	names, err := env.writeImages(ctx, cfg.Images)
	if err != nil {
		return nil, err
	}
	res := &OffloadPolicy{Policy: pol, AllCompleted: true}
	if pol == "cpu" {
		res.Threshold = cfg.CPUThreshold
	}
	clients := make([]*offload.Client, cfg.Clients)
	for i := range clients {
		if clients[i], err = env.client(env.engineAddr, fmt.Sprintf("client-%d", i+1), nil); err != nil {
			return nil, err
		}
	}
	// Sample the target's CPU while the clients run.
	pid := strconv.Itoa(env.target.Pid())
	var samples []float64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		last, at := time.Duration(0), time.Time{}
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if cpu, err := harness.ProcCPU(pid); err == nil {
				now := time.Now()
				if !at.IsZero() {
					samples = append(samples, float64(cpu-last)/float64(now.Sub(at)*time.Duration(runtime.NumCPU())))
				}
				last, at = cpu, now
			}
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
		}
	}()
	deadline := time.Now().Add(cfg.Duration)
	counts := make([]OffloadClient, cfg.Clients)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i, c := range clients {
		counts[i].Client = fmt.Sprintf("client-%d", i+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := i * cfg.Batch; time.Now().Before(deadline); k += cfg.Batch {
				lo := k % len(names)
				batch := names[lo:min(lo+cfg.Batch, len(names))]
				local, err := offloadBatch(ctx, env.fsys, c, batch, cfg.Size, uint64(lo))
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if local {
					counts[i].Local++
				} else {
					counts[i].Engine++
				}
			}
		}()
	}
	wg.Wait()
	close(stopSampling)
	<-sampled
	if len(errs) > 0 {
		res.AllCompleted = false
		return res, errors.Join(errs...)
	}
	res.Clients = counts
	xs := make([]float64, len(counts))
	total := 0
	for i, c := range counts {
		xs[i] = float64(c.Engine)
		total += c.Engine + c.Local
	}
	res.Jain = offload.Jain(xs)
	res.TasksPerSec = float64(total) / cfg.Duration.Seconds()
	res.TargetCPU = [3]float64{report.Median(samples), percentile(samples, 0.9), percentile(samples, 1)}
	return res, nil
}

// offloadBatch offloads one OffloadPrep batch.
func offloadBatch(ctx context.Context, fsys *offloadfs.FS, c *offload.Client, names []string, size int, first uint64) (bool, error) {
	files := make([]offloadfs.OffloadFile, len(names))
	for i, n := range names {
		f, err := fsys.Open(n)
		if err != nil {
			return false, err
		}
		defer f.Close()
		files[i] = offloadfs.OffloadFile{In: f}
	}
	res, err := fsys.Offload(ctx, c, prep.TaskName, files, prep.EncodeArgs(prep.Options{Size: size}, 1, first))
	if err != nil {
		return false, err
	}
	return res.Local, nil
}

// percentile returns the q-quantile of xs by nearest rank (0 for none).
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// WriteTable prints each policy's counts and the bars.
func WriteTable(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "offload admission: %d clients offloading OffloadPrep batches at once for %.0fs per policy (%d tokens)\n\n", r.Clients, r.Seconds, r.Tokens)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tclient\ton engine\tlocal\tJain (engine)\ttarget CPU median/p90/max\ttasks/s\t")
	for _, p := range r.Policies {
		for i, c := range p.Clients {
			jain, cpu, rate := "", "", ""
			if i == 0 {
				jain = fmt.Sprintf("%.3f", p.Jain)
				cpu = fmt.Sprintf("%.2f/%.2f/%.2f", p.TargetCPU[0], p.TargetCPU[1], p.TargetCPU[2])
				rate = fmt.Sprintf("%.1f", p.TasksPerSec)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t\n", p.Policy, c.Client, c.Engine, c.Local, jain, cpu, rate)
		}
	}
	return report.WriteTableBars(w, tw, r.Bars)
}

// SavePlot draws each client's tasks on the engine and locally,
// per policy, as stacked bars.
func SavePlot(path string, r *Report) error {
	if r == nil || len(r.Policies) == 0 {
		return errors.New("bench: nothing to plot")
	}
	return report.SavePlot(path, 8*vg.Inch, 4.5*vg.Inch, func() (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("offload admission: tasks per client in %.0fs (engine, then local)\nlabels: Jain's index (engine), target CPU median", r.Seconds)
		p.Y.Label.Text = "tasks"
		var eng, loc plotter.Values
		var names []string
		xy := plotter.XYLabels{}
		top := 0.0
		for _, pol := range r.Policies {
			for _, c := range pol.Clients {
				top = max(top, float64(c.Engine+c.Local))
			}
		}
		for _, pol := range r.Policies {
			for i, c := range pol.Clients {
				eng = append(eng, float64(c.Engine))
				loc = append(loc, float64(c.Local))
				names = append(names, pol.Policy+"\n"+c.Client)
				if i == 0 {
					xy.XYs = append(xy.XYs, plotter.XY{X: float64(len(names) - 1), Y: top * 1.08})
					xy.Labels = append(xy.Labels, fmt.Sprintf("Jain %.3f\nCPU %.2f", pol.Jain, pol.TargetCPU[0]))
				}
			}
		}
		be, err := report.Bars(eng, vg.Points(22), report.Blue)
		if err != nil {
			return nil, err
		}
		bl, err := report.Bars(loc, vg.Points(22), report.Orange)
		if err != nil {
			return nil, err
		}
		bl.StackOn(be)
		p.Add(be, bl)
		p.Legend.Add("on the engine", be)
		p.Legend.Add("local (turned away)", bl)
		l, err := report.CenteredLabels(xy, vg.Points(7))
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.NominalX(names...)
		p.X.Tick.Label.Font.Size = vg.Points(7)
		p.Y.Min, p.Y.Max = 0, top*1.35
		p.Legend.Top = true
		return p, nil
	})
}

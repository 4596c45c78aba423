package blockio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nearstore/nearstore/bench/proc"
)

// Nbdkit is the baseline the issue names: nbdkit's memory plugin (its
// default sparse allocator) serving Size bytes on a loopback port, driven
// by fio's nbd engine (libnbd), one NBD connection per fio job. Set the
// fields, then Start; Close stops nbdkit.
type Nbdkit struct {
	// Size is the memory disk's size in bytes.
	Size int64
	// Threads is nbdkit's --threads (0: nbdkit's default, 16).
	Threads int
	// ServerCPUs and ClientCPUs pin nbdkit and fio with taskset (empty:
	// not pinned).
	ServerCPUs, ClientCPUs string
	// NbdkitPath and FioPath default to nbdkit and fio on $PATH.
	NbdkitPath, FioPath string

	proc *proc.Process
	uri  string
	tmp  string
}

// Name returns "nbdkit".
func (n *Nbdkit) Name() string { return "nbdkit" }

func (n *Nbdkit) paths() (nbdkit, fio string, err error) {
	nbdkit, fio = n.NbdkitPath, n.FioPath
	if nbdkit == "" {
		if nbdkit, err = exec.LookPath("nbdkit"); err != nil {
			return "", "", fmt.Errorf("bench: nbdkit baseline: %w (scripts/bench-deps.sh installs it)", err)
		}
	}
	if fio == "" {
		if fio, err = exec.LookPath("fio"); err != nil {
			return "", "", fmt.Errorf("bench: nbdkit baseline: %w (scripts/bench-deps.sh installs it)", err)
		}
	}
	return nbdkit, fio, nil
}

// Available reports whether nbdkit and fio are installed.
func (n *Nbdkit) Available() error {
	_, _, err := n.paths()
	return err
}

// Version returns the versions of nbdkit and fio.
func (n *Nbdkit) Version(ctx context.Context) string {
	nbdkit, fio, err := n.paths()
	if err != nil {
		return "not installed"
	}
	return firstLine(ctx, nbdkit, "--version") + ", " + firstLine(ctx, fio, "--version")
}

func firstLine(ctx context.Context, path string, args ...string) string {
	out, err := exec.CommandContext(ctx, path, args...).Output()
	if err != nil {
		return filepath.Base(path) + " (unknown version)"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// Start starts nbdkit on a free loopback port, waits until it accepts
// connections, and fills the whole disk with a sequential write pass so
// that reads find allocated memory, as they do on the nearstore side.
func (n *Nbdkit) Start(ctx context.Context) error {
	nbdkit, _, err := n.paths()
	if err != nil {
		return err
	}
	if n.tmp, err = os.MkdirTemp("", "nearstore-bench-"); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	port, err := proc.FreePort()
	if err != nil {
		return err
	}
	args := []string{"--foreground", "--exit-with-parent", "--ipaddr", "127.0.0.1", "--port", strconv.Itoa(port)}
	if n.Threads > 0 {
		args = append(args, "--threads", strconv.Itoa(n.Threads))
	}
	args = append(args, "memory", "size="+strconv.FormatInt(n.Size, 10))
	n.proc, err = proc.Start(ctx, proc.Spec{Name: "nbdkit", Path: nbdkit, Args: args, CPUs: n.ServerCPUs})
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	n.uri = "nbd://" + addr
	if err := proc.WaitListening(ctx, addr, n.proc, 10*time.Second); err != nil {
		return err
	}
	return n.fill(ctx)
}

// fill writes the whole disk once, sequentially, in 1 MiB requests.
func (n *Nbdkit) fill(ctx context.Context) error {
	args := []string{
		"--name=fill", "--ioengine=nbd", "--uri=" + n.uri, "--rw=write", "--bs=1m", "--iodepth=4",
		"--size=" + strconv.FormatInt(n.Size, 10), "--output-format=json", "--eta=never",
		"--output=" + filepath.Join(n.tmp, "fill.json"),
	}
	_, err := n.fio(ctx, args, 0, nil)
	return err
}

// Run runs one fio job group against nbdkit: the same pattern, block
// size and queue depth as cfg, one fio job (one NBD connection) per queue.
func (n *Nbdkit) Run(ctx context.Context, cfg Config) (Result, error) {
	if n.proc == nil {
		return Result{}, errors.New("bench: nbdkit baseline not started")
	}
	out := filepath.Join(n.tmp, "run.json")
	args := fioArgs(n.uri, cfg)
	args = append(args, "--output="+out)
	cpu := startCPU(n.proc.Pid())
	res, err := n.fio(ctx, args, cfg.Duration, cfg.Progress)
	if err != nil {
		return Result{}, err
	}
	cpu.stop(&res)
	res.ClientCPUus = 0 // the client is fio, not this process
	res.System = n.Name()
	res.Pattern, res.BlockSize, res.QueueDepth, res.Queues = cfg.Pattern, cfg.BlockSize, cfg.QueueDepth, cfg.Queues
	return res, nil
}

// fioArgs returns the fio command line (without --output) that runs cfg
// through fio's nbd engine against uri: time based, random offsets drawn
// with replacement (as Run does), latency percentiles from
// submission to completion.
func fioArgs(uri string, cfg Config) []string {
	args := []string{
		"--name=nbd", "--ioengine=nbd", "--uri=" + uri,
		"--rw=" + cfg.Pattern, "--bs=" + strconv.Itoa(cfg.BlockSize),
		"--iodepth=" + strconv.Itoa(cfg.QueueDepth), "--numjobs=" + strconv.Itoa(cfg.Queues),
		"--time_based", "--runtime=" + strconv.FormatInt(max(cfg.Duration.Milliseconds(), 1), 10) + "ms",
		"--group_reporting", "--norandommap", "--randrepeat=0", "--lat_percentiles=1",
		"--output-format=json", "--eta=never",
	}
	if cfg.Region > 0 {
		args = append(args, "--size="+strconv.FormatInt(cfg.Region, 10))
	}
	return args
}

// fio runs fio with args (which must write JSON to an --output file) and
// parses the report. progress, if set, hears the elapsed time (ops -1:
// fio does not report them live) every 200 ms.
func (n *Nbdkit) fio(ctx context.Context, args []string, d time.Duration, progress func(time.Duration, int64)) (Result, error) {
	_, fio, err := n.paths()
	if err != nil {
		return Result{}, err
	}
	var outFile string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--output="); ok {
			outFile = v
		}
	}
	if outFile == "" {
		return Result{}, errors.New("bench: fio needs an --output file")
	}
	_ = os.Remove(outFile)
	p, err := proc.Start(ctx, proc.Spec{Name: "fio", Path: fio, Args: args, CPUs: n.ClientCPUs})
	if err != nil {
		return Result{}, err
	}
	if progress != nil {
		start := time.Now()
		t := time.NewTicker(200 * time.Millisecond)
	loop:
		for {
			select {
			case <-t.C:
				progress(min(time.Since(start), d), -1)
			case <-p.Done():
				break loop
			}
		}
		t.Stop()
		progress(d, -1)
	}
	if err := p.Wait(); err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		return Result{}, err
	}
	data, err := os.ReadFile(outFile)
	if err != nil {
		return Result{}, fmt.Errorf("bench: fio report: %w", err)
	}
	return ParseFioJSON(data)
}

// Close stops nbdkit and removes its temporary files.
func (n *Nbdkit) Close() error {
	var err error
	if n.proc != nil {
		err = n.proc.Stop()
		n.proc = nil
	}
	if n.tmp != "" {
		_ = os.RemoveAll(n.tmp)
		n.tmp = ""
	}
	return err
}

// fioReport is the part of fio's JSON report ParseFioJSON reads.
type fioReport struct {
	Version string   `json:"fio version"`
	Jobs    []fioJob `json:"jobs"`
}

type fioJob struct {
	Name    string            `json:"jobname"`
	Error   int               `json:"error"`
	Options map[string]string `json:"job options"`
	Read    fioDir            `json:"read"`
	Write   fioDir            `json:"write"`
	Elapsed float64           `json:"elapsed"`
}

type fioDir struct {
	IOBytes  int64   `json:"io_bytes"`
	BWBytes  float64 `json:"bw_bytes"`
	IOPS     float64 `json:"iops"`
	Runtime  float64 `json:"runtime"` // ms
	TotalIOs int64   `json:"total_ios"`
	ClatNS   fioLat  `json:"clat_ns"`
	LatNS    fioLat  `json:"lat_ns"`
}

type fioLat struct {
	N          int64              `json:"N"`
	Percentile map[string]float64 `json:"percentile"`
}

// ParseFioJSON reads the JSON report (--output-format=json) of a fio run
// of one group-reported job doing only reads or only writes. Latency
// percentiles are total latency (lat_ns, submission to completion, which
// --lat_percentiles=1 reports) when present, else completion latency
// (clat_ns). Anything before the first '{' (fio prints "fio: connected to
// NBD server" to stdout) is skipped. The result's System, Pattern,
// BlockSize, QueueDepth and Queues come from the job's options as far as it
// states them; the caller should set them.
func ParseFioJSON(data []byte) (Result, error) {
	if i := bytes.IndexByte(data, '{'); i > 0 {
		data = data[i:]
	}
	var rep fioReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return Result{}, fmt.Errorf("bench: parsing fio JSON: %w", err)
	}
	if len(rep.Jobs) == 0 {
		return Result{}, errors.New("bench: fio report has no jobs")
	}
	if len(rep.Jobs) > 1 {
		return Result{}, fmt.Errorf("bench: fio report has %d jobs; run it with --group_reporting", len(rep.Jobs))
	}
	j := rep.Jobs[0]
	d := j.Read
	switch {
	case j.Read.TotalIOs > 0 && j.Write.TotalIOs > 0:
		return Result{}, errors.New("bench: fio report mixes reads and writes")
	case j.Write.TotalIOs > 0:
		d = j.Write
	}
	res := Result{
		System:  "fio",
		Pattern: j.Options["rw"],
		Seconds: d.Runtime / 1e3,
		Ops:     d.TotalIOs,
		IOPS:    d.IOPS,
		MBps:    d.BWBytes / 1e6,
	}
	if v, err := strconv.Atoi(j.Options["iodepth"]); err == nil {
		res.QueueDepth = v
	}
	if v, err := strconv.Atoi(j.Options["numjobs"]); err == nil {
		res.Queues = v
	}
	if v, err := strconv.Atoi(j.Options["bs"]); err == nil {
		res.BlockSize = v
	}
	pct := d.LatNS.Percentile
	if len(pct) == 0 {
		pct = d.ClatNS.Percentile
	}
	res.P50us = pct["50.000000"] / 1e3
	res.P99us = pct["99.000000"] / 1e3
	res.P999us = pct["99.900000"] / 1e3
	if j.Error != 0 {
		res.Errors = 1
		return res, fmt.Errorf("bench: fio job %q failed with error %d", j.Name, j.Error)
	}
	if d.TotalIOs == 0 {
		return res, errors.New("bench: fio completed no I/O")
	}
	return res, nil
}

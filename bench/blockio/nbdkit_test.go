package blockio

import (
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(math.Abs(a), math.Abs(b), 1) }

// The testdata reports are real fio 3.33 output (nbd engine against nbdkit
// 1.32's memory plugin), captured with fioArgs' options.
func TestParseFioJSON(t *testing.T) {
	for _, tc := range []struct {
		file           string
		rw             string
		qd, jobs       int
		iops, mbps     float64
		ops            int64
		seconds        float64
		p50, p99, p999 float64
	}{
		{
			file: "fio-randread-qd32-1job.json", rw: "randread", qd: 32, jobs: 1,
			iops: 43812.187812, mbps: 179.454721, ops: 43856, seconds: 1.001,
			p50: 423.936, p99: 4489.216, p999: 5734.400,
		},
		{
			file: "fio-randwrite-qd1-2jobs.json", rw: "randwrite", qd: 1, jobs: 2,
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			r, err := ParseFioJSON(data)
			if err != nil {
				t.Fatal(err)
			}
			if r.Pattern != tc.rw || r.QueueDepth != tc.qd || r.Queues != tc.jobs {
				t.Errorf("got rw %q qd %d jobs %d, want %q %d %d", r.Pattern, r.QueueDepth, r.Queues, tc.rw, tc.qd, tc.jobs)
			}
			if r.IOPS <= 0 || r.Ops <= 0 || r.P50us <= 0 || r.P99us < r.P50us || r.P999us < r.P99us || r.Errors != 0 {
				t.Errorf("implausible result %+v", r)
			}
			if tc.iops == 0 {
				return
			}
			if !near(r.IOPS, tc.iops) || !near(r.MBps, tc.mbps) || r.Ops != tc.ops || !near(r.Seconds, tc.seconds) {
				t.Errorf("got IOPS %v MB/s %v ops %d s %v, want %v %v %d %v", r.IOPS, r.MBps, r.Ops, r.Seconds, tc.iops, tc.mbps, tc.ops, tc.seconds)
			}
			// lat_ns (submission to completion), not clat_ns (415.744 µs).
			if !near(r.P50us, tc.p50) || !near(r.P99us, tc.p99) || !near(r.P999us, tc.p999) {
				t.Errorf("got p50/p99/p99.9 %v/%v/%v µs, want %v/%v/%v", r.P50us, r.P99us, r.P999us, tc.p50, tc.p99, tc.p999)
			}
		})
	}
}

func TestParseFioJSONEdgeCases(t *testing.T) {
	data, err := os.ReadFile("testdata/fio-randread-qd32-1job.json")
	if err != nil {
		t.Fatal(err)
	}
	// fio prints this to stdout before the report when it is not told --output.
	if _, err := ParseFioJSON(append([]byte("fio: connected to NBD server\n"), data...)); err != nil {
		t.Errorf("leading status line: %v", err)
	}
	// Without --lat_percentiles, only clat_ns has percentiles.
	noLat := strings.Replace(string(data), `"lat_ns"`, `"lat_ns_unused"`, 1)
	r, err := ParseFioJSON([]byte(noLat))
	if err != nil || !near(r.P50us, 415.744) {
		t.Errorf("clat fallback: p50 %v, err %v; want 415.744", r.P50us, err)
	}
	failed := strings.Replace(string(data), `"error" : 0`, `"error" : 5`, 1)
	if _, err := ParseFioJSON([]byte(failed)); err == nil {
		t.Error("a failed job parsed without error")
	}
	for _, bad := range []string{"", "fio: no JSON", `{"jobs": []}`, `{"jobs": [{"read": {}}, {"read": {}}]}`, `{"jobs": [{"read": {"total_ios": 0}}]}`} {
		if _, err := ParseFioJSON([]byte(bad)); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

func TestFioArgs(t *testing.T) {
	args := fioArgs("nbd://127.0.0.1:10809", Config{Pattern: "randread", BlockSize: 4096, QueueDepth: 32, Queues: 2, Duration: 1500 * time.Millisecond})
	for _, want := range []string{"--ioengine=nbd", "--uri=nbd://127.0.0.1:10809", "--rw=randread", "--bs=4096", "--iodepth=32", "--numjobs=2", "--runtime=1500ms", "--time_based", "--group_reporting", "--output-format=json"} {
		if !slices.Contains(args, want) {
			t.Errorf("fioArgs lacks %s: %q", want, args)
		}
	}
}

// TestNbdkitBaseline runs the real baseline briefly when nbdkit and fio
// are installed (scripts/bench-deps.sh); it is skipped otherwise and with
// -short.
func TestNbdkitBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	nb := &Nbdkit{Size: 16 << 20}
	if err := nb.Available(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	if err := nb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	r, err := nb.Run(ctx, Config{Pattern: "randread", BlockSize: 4096, QueueDepth: 4, Queues: 2, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.System != "nbdkit" || r.IOPS <= 0 || r.Queues != 2 || r.QueueDepth != 4 {
		t.Errorf("result %+v", r)
	}
	proc := nb.proc
	if err := nb.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-proc.Done():
	default:
		t.Errorf("nbdkit (pid %d) still running after Close", proc.Pid())
	}
}

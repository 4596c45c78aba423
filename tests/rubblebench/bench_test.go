// Package rubblebench_test runs "nearstore bench rubble" small, end to end:
// real node processes, a real etcd, real chains, and checks what the JSON
// report says against what such a run must show.
package rubblebench_test

import (
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/bench/rubblebench"
	"github.com/nearstore/nearstore/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m) }

const (
	records   = 2000
	valueSize = 256
)

// bench runs bench rubble with a tiny configuration plus args and decodes
// its JSON report.
func bench(t *testing.T, args ...string) *rubblebench.Report {
	t.Helper()
	args = append([]string{"bench", "rubble", "--records", "2000", "--ops", "1500", "--value-size", "256", "--threads", "8",
		"--memtable-size", "65536", "--repeat", "1", "--json", "--quiet"}, args...)
	res := clitest.Run(t, 5*time.Minute, nil, nil, args...)
	if res.Code != 0 {
		t.Fatalf("exit %d\nstderr: %s", res.Code, res.Stderr)
	}
	var r rubblebench.Report
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("%v\n%s", err, res.Stdout)
	}
	return &r
}

// TestBaselineAgainstItself runs the rubble side as the baseline (an A/A
// run) at R = 2 and 3 with two groups: every phase of both modes must be
// there with every node, one primary per run, CPU spent by every node
// over its run, the loaded bytes on the wire at every replica,
// compactions on every replica (the baseline compacts everywhere), and
// the bars computed and, for compaction on the secondaries, missed.
func TestBaselineAgainstItself(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 clusters of real node processes")
	}
	plot := filepath.Join(t.TempDir(), "rubble.png")
	r := bench(t, "--replicas", "2,3", "--groups", "2", "--rubble-store", "lsm", "--plot", plot)
	if len(r.Runs) != 2*2*4 || len(r.Medians) != 2*2*4 {
		t.Fatalf("%d runs, %d medians: want 2 modes × 2 R × 4 workloads", len(r.Runs), len(r.Medians))
	}
	compactions := map[string]float64{}
	cpu := map[string]float64{}
	for _, p := range r.Runs {
		if len(p.Nodes) != p.Replicas || p.Ops == 0 || p.OpsPerSec <= 0 || p.P50us <= 0 || p.P99us < p.P50us || p.MixedRoles {
			t.Fatalf("phase %+v", p)
		}
		primaries := 0
		for _, n := range p.Nodes {
			if n.Role == rubblebench.RolePrimary {
				primaries++
			}
			// CPU time is counted in clock ticks (/proc/PID/stat): a
			// node with a few writes to apply in a read-mostly phase of
			// 1,500 operations may spend less than one, so each node's
			// CPU is checked over its run's phases together.
			cpu[fmt.Sprintf("%s R=%d node %s", p.Mode, p.Replicas, n.ID)] += n.CPUSeconds
			if p.Workload == "load" && n.Net.Received < records*valueSize {
				t.Errorf("%s R=%d load: node %s (%s) received %d bytes, less than the %d loaded", p.Mode, p.Replicas, n.ID, n.Role, n.Net.Received, records*valueSize)
			}
			compactions[n.Role] += float64(n.Compactions)
		}
		if primaries != 1 {
			t.Fatalf("%s R=%d %s: %d primaries", p.Mode, p.Replicas, p.Workload, primaries)
		}
		if tot := p.CPUus.Primary + p.CPUus.Secondaries; tot < p.CPUus.Total*0.999 || tot > p.CPUus.Total*1.001 || p.CPUus.Total > 1e5 {
			t.Fatalf("CPU per op by role %+v", p.CPUus)
		}
	}
	for node, s := range cpu {
		if s <= 0 {
			t.Errorf("%s spent no CPU in its run", node)
		}
	}
	if compactions[rubblebench.RolePrimary] == 0 || compactions[rubblebench.RoleSecondary] == 0 {
		t.Fatalf("compactions by role %v: the baseline compacts on every replica", compactions)
	}
	if len(r.Bars) != 2 || r.Bars[1].Met || r.Bars[1].Got == 0 {
		t.Fatalf("bars %+v", r.Bars)
	}
	if r.Modes[1].Store != "lsm" || !r.Modes[1].Available {
		t.Fatalf("modes %+v", r.Modes)
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if img, err := png.Decode(f); err != nil || img.Bounds().Dx() < 500 {
		t.Fatalf("plot: %v", err)
	}
}

// TestRefusedModeIsUnavailable gives the rubble side a store no build
// has: the run must report it unavailable with the node's refusal, and
// still measure the baseline.
func TestRefusedModeIsUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters of real node processes")
	}
	r := bench(t, "--replicas", "2", "--workloads", "A", "--rubble-store", "nosuch")
	if m := r.Modes[1]; m.Available || !strings.Contains(m.Unavailable, `"nosuch"`) {
		t.Fatalf("rubble mode %+v", m)
	}
	if len(r.Medians) != 2 || r.Medians[0].Mode != rubblebench.Baseline || r.Medians[1].Workload != "A" {
		t.Fatalf("medians %+v", r.Medians)
	}
	for _, b := range r.Bars {
		if b.Met || !strings.Contains(b.What, "unavailable") {
			t.Fatalf("bar %+v", b)
		}
	}
}

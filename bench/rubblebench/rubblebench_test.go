package rubblebench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/bench/internal/plottest"
	"github.com/nearstore/nearstore/bench/ycsb"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/vfs"
)

// TestNodeLogCountsRealCompactions runs a kv/lsm store whose logger
// writes, as a node's does, slog text to a nodeLog, and forces
// compactions: the log must count what the store's metrics count, so a
// change to kv/lsm's compaction line breaks this test, not the bench's
// figures.
func TestNodeLogCountsRealCompactions(t *testing.T) {
	var fwd bytes.Buffer
	nl := &nodeLog{id: "n7", fwd: &fwd}
	log := slog.New(slog.NewTextHandler(nl, &slog.HandlerOptions{Level: slog.LevelDebug}))
	db, err := lsm.Open(vfs.OS(""), t.TempDir(), lsm.Options{MemTableSize: 32 << 10, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := rand.New(rand.NewPCG(1, 2))
	v := make([]byte, 200)
	for i := range 4000 {
		fillValue(v, uint64(i), 0, r)
		if err := db.Set(ycsb.Key(uint64(i%1500)), v, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Compact(context.Background(), []byte("a"), []byte("z")); err != nil {
		t.Fatal(err)
	}
	m := db.Metrics()
	got := nl.counts()
	if m.Compact.Count == 0 || got.n != m.Compact.Count || got.bytes != m.Compact.BytesRead+m.Compact.BytesWritten || got.wall <= 0 {
		t.Fatalf("log counted %+v; the store: %d compactions, %d bytes read, %d written", got, m.Compact.Count, m.Compact.BytesRead, m.Compact.BytesWritten)
	}
	log.Warn("something odd", "n", 1)
	log.Debug("chatter")
	if s := fwd.String(); !strings.HasPrefix(s, "n7: ") || !strings.Contains(s, "something odd") || strings.Contains(s, "chatter") {
		t.Fatalf("forwarded %q", s)
	}
}

func TestNodeLogSplitsWrites(t *testing.T) {
	nl := &nodeLog{id: "n1"}
	line := "time=x level=DEBUG msg=compacted from=0 to=1 inputs=\"[1 2]\" in=100 out=50 took=2ms\n"
	all := strings.Repeat(line, 3) + "level=DEBUG msg=compacted in=1 out=1\n" // no took: not counted
	for i := 0; i < len(all); i += 7 {
		nl.Write([]byte(all[i:min(i+7, len(all))]))
	}
	if c := nl.counts(); c.n != 3 || c.bytes != 450 || c.wall != 6*time.Millisecond {
		t.Fatalf("%+v", c)
	}
}

func TestParseCompacted(t *testing.T) {
	for _, c := range []struct {
		line    string
		in, out uint64
		ok      bool
	}{
		{"level=DEBUG msg=compacted in=5 out=6 took=1s", 5, 6, true},
		{"level=DEBUG msg=\"compacted twice\" in=5 out=6 took=1s", 0, 0, false},
		{"level=DEBUG msg=flushed in=5 out=6 took=1s", 0, 0, false},
		{"level=DEBUG msg=compacted inputs=5 out=6 took=1s", 0, 0, false},
		{"level=DEBUG msg=compacted in=x out=6 took=1s", 0, 0, false},
		{"", 0, 0, false},
	} {
		in, out, _, ok := parseCompacted(c.line)
		if ok != c.ok || ok && (in != c.in || out != c.out) {
			t.Errorf("%q: %d %d %v", c.line, in, out, ok)
		}
	}
}

// TestNodeLogShipStats: the latest "chain shipped" line of each group
// counts, summed over groups; other lines do not.
func TestNodeLogShipStats(t *testing.T) {
	nl := &nodeLog{id: "n1"}
	for _, l := range []string{
		`time=x level=DEBUG msg="chain shipped" group=g0 messages=10 writes=40`,
		`time=x level=DEBUG msg="chain shipped" group=g1 messages=1 writes=1`,
		`time=x level=DEBUG msg="chain shipped" group=g0 messages=12 writes=50`,
		`time=x level=DEBUG msg="chain shipped" group=g0 messages=x writes=60`,
		`time=x level=DEBUG msg=compacted in=1 out=1 took=1ms`,
	} {
		nl.Write([]byte(l + "\n"))
	}
	if c := nl.shipped().total(); c != (shipCount{messages: 13, writes: 51}) {
		t.Fatalf("%+v", c)
	}
	w := writesPerShip([]NodeUse{
		{Role: RolePrimary, ShipMessages: 10, ShipWrites: 40},
		{Role: RoleSecondary, ShipMessages: 5, ShipWrites: 40},
		{Role: RoleSecondary}, // the tail sends none
	})
	if w.Primary != 4 || w.Secondary != 8 || w.Total != 80.0/15 {
		t.Fatalf("%+v", w)
	}
}

func TestRolesOf(t *testing.T) {
	roles := rolesOf(map[string][]string{"g0": {"n2", "n1", "n3"}, "g1": {"n2", "n3", "n1"}})
	if roles["n2"] != RolePrimary || roles["n1"] != RoleSecondary || roles["n3"] != RoleSecondary {
		t.Fatalf("%v", roles)
	}
	roles = rolesOf(map[string][]string{"g0": {"n1", "n2"}, "g1": {"n2", "n1"}})
	if roles["n1"] != RoleMixed || roles["n2"] != RoleMixed {
		t.Fatalf("%v", roles)
	}
	r := byRole([]NodeUse{{Role: RolePrimary, CPUSeconds: 3}, {Role: RoleSecondary, CPUSeconds: 1}, {Role: RoleSecondary, CPUSeconds: 2}, {Role: RoleMixed, CPUSeconds: 4}},
		func(u NodeUse) float64 { return u.CPUSeconds })
	if r != (Roles{Primary: 3, Secondary: 1.5, Secondaries: 3, Total: 10}) {
		t.Fatalf("%+v", r)
	}
}

func TestYCSBShards(t *testing.T) {
	m, err := YCSBShards(3)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for i := range uint64(9000) {
		count[m.Group(ycsb.Key(i))]++
	}
	for _, g := range []string{"g0", "g1", "g2"} {
		if count[g] < 2700 || count[g] > 3300 {
			t.Fatalf("%v", count)
		}
	}
	if m, err := YCSBShards(1); err != nil || len(m.Shards) != 1 || m.Shards[0].Group != "g0" {
		t.Fatalf("%+v %v", m, err)
	}
}

func TestValues(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	v := make([]byte, 100)
	fillValue(v, 42, 7, r)
	if checkValue(v, 42, 100) != nil || checkValue(v, 43, 100) == nil || checkValue(v[:99], 42, 100) == nil || checkValue(nil, 42, 100) == nil {
		t.Fatal("checkValue")
	}
}

func TestConfigRefusals(t *testing.T) {
	for _, c := range []Config{
		{},
		{Binary: "x", Replicas: []int{1}},
		{Binary: "x", Groups: -1},
		{Binary: "x", ValueSize: 8},
		{Binary: "x", Records: 1},
		{Binary: "x", Workloads: []ycsb.Workload{ycsb.E}},
		{Binary: "x", Ops: -5},
	} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%+v: ran", c)
		}
	}
}

// synthetic is a report as two modes at R = 3 would leave it.
func synthetic(rubbleTotal, secondaryCompactions float64) *Report {
	cfg := Config{Binary: "x"}
	cfg.defaults()
	r := newReport(&cfg)
	for run := 1; run <= 3; run++ {
		for _, wl := range []string{"load", "A"} {
			r.Runs = append(r.Runs,
				Phase{Mode: Baseline, Replicas: 3, Workload: wl, Run: run, Ops: 1000, OpsPerSec: 1000 + float64(run),
					CPUus: Roles{Primary: 100, Secondary: 50, Secondaries: 100, Total: 200}, Compactions: Roles{Primary: 2, Secondaries: 4, Total: 6}},
				Phase{Mode: Rubble, Replicas: 3, Workload: wl, Run: run, Ops: 1000, OpsPerSec: 1500,
					CPUus: Roles{Primary: rubbleTotal - 40, Secondary: 20, Secondaries: 40, Total: rubbleTotal}, Compactions: Roles{Primary: 2, Secondaries: secondaryCompactions}})
		}
	}
	r.finish()
	return r
}

func TestBars(t *testing.T) {
	for _, c := range []struct {
		total, comp, primComp float64
		met                   [2]bool
		got                   float64
	}{
		{120, 0, 2, [2]bool{true, true}, 0.4},
		{150, 0, 2, [2]bool{false, true}, 0.25},
		{120, 1, 2, [2]bool{true, false}, 0.4},
		{120, 0, 0, [2]bool{true, false}, 0.4}, // nothing counted anywhere proves nothing
	} {
		r := synthetic(c.total, c.comp)
		for i := range r.Runs {
			if r.Runs[i].Mode == Rubble {
				r.Runs[i].Compactions.Primary = c.primComp
			}
		}
		r.finish()
		if len(r.Bars) != 2 || r.Bars[0].Met != c.met[0] || r.Bars[1].Met != c.met[1] || fmt.Sprintf("%.3f", r.Bars[0].Got) != fmt.Sprintf("%.3f", c.got) {
			t.Errorf("%v: %+v", c, r.Bars)
		}
	}
	r := synthetic(120, 0)
	r.Runs = r.Runs[:0]
	for _, p := range synthetic(120, 0).Runs {
		if p.Mode == Baseline {
			r.Runs = append(r.Runs, p)
		}
	}
	r.mode(Rubble).Available, r.mode(Rubble).Unavailable = false, "refused"
	r.finish()
	for _, b := range r.Bars {
		if b.Met || !strings.Contains(b.What, "rubble mode unavailable") {
			t.Errorf("rubble unavailable: %+v", b)
		}
	}
}

func TestTablePlotJSON(t *testing.T) {
	r := synthetic(120, 0)
	r.Retried = []string{"rubble R=3 run 2: load: the chains changed"}
	if m, ok := r.Median(Baseline, 3, "A"); !ok || m.OpsPerSec != 1002 || m.CPUus.Total != 200 || m.Run != 0 {
		t.Fatalf("median %+v", m)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CPU time per operation is the figure to compare", "R=3 A    CPU/op 0.60×  throughput 1.50×", "bar: R = 3, YCSB A", "compaction CPU: n/a",
		"run again (figures dropped): rubble R=3 run 2"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	path := filepath.Join(t.TempDir(), "rubble.png")
	if err := SavePlot(path, r); err != nil {
		t.Fatal(err)
	}
	if img := plottest.DecodePNG(t, path); img.Bounds().Dx() < 500 {
		t.Fatalf("plot is %v", img.Bounds())
	}
	if err := SavePlot(filepath.Join(t.TempDir(), "x.png"), &Report{}); err == nil {
		t.Fatal("plotted an empty report")
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}

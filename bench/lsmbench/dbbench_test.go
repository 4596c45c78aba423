package lsmbench

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/bench/ycsb"
)

func TestParseWorkloads(t *testing.T) {
	for _, tc := range []struct {
		list, want, err string
	}{
		{list: "fillrandom,readrandom,scan", want: "fillrandom readrandom scan"},
		{list: "A, FillRandom ,c,SCAN", want: "A fillrandom C scan"},
		{list: "all,readrandom", want: "A B C D E F readrandom"},
		{list: "scan,A,scan", err: "twice"},
		{list: "A,all", err: "twice"},
		{list: "fillseq", err: "fillrandom"},
		{list: "", err: "want"},
	} {
		ws, err := ParseWorkloads(tc.list)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error with %q", tc.list, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.list, err)
		}
		var names []string
		for _, w := range ws {
			names = append(names, w.Name)
		}
		if got := strings.Join(names, " "); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.list, got, tc.want)
		}
	}
}

// TestRunDBBench runs db_bench's workloads at a tiny size on both
// engines: fillrandom inserts --records records and measures their write
// amplification, readrandom finds every key it reads (Run fails on a
// miss), scan reads 100 records per seek but near the end of the key
// space, and every phase has ordered latency quantiles.
func TestRunDBBench(t *testing.T) {
	const records, ops = 2000, 1000
	rep, err := Run(context.Background(), Config{Dir: t.TempDir(), Records: records, Ops: ops, Threads: 2,
		MemTable: 1 << 20, Cache: 1 << 20, Repeat: 1,
		Workloads: []ycsb.Workload{FillRandom, ReadRandom, SeekScan}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Phases) != 8 {
		t.Fatalf("%d phases, want 8: %+v", len(rep.Phases), rep.Phases)
	}
	for _, eng := range []string{"kv/lsm", "pebble"} {
		byWl := map[string]Phase{}
		for _, p := range rep.Phases {
			if p.Engine == eng {
				byWl[p.Workload] = p
			}
			if p.OpsPerSec <= 0 || p.CPUus <= 0 || p.SpaceAmp <= 0 || p.P50us <= 0 || p.P99us < p.P50us || p.P999us < p.P99us {
				t.Fatalf("phase %+v", p)
			}
		}
		fill, read, scan := byWl["fillrandom"], byWl["readrandom"], byWl["scan"]
		if fill.Ops != records || fill.WriteAmp < 0.5 {
			t.Errorf("%s fillrandom: %d ops, write amp %.2f; want %d ops and the records written", eng, fill.Ops, fill.WriteAmp, records)
		}
		if read.Ops != ops || read.ScanEntries != 0 || read.WriteAmp != 0 {
			t.Errorf("%s readrandom %+v", eng, read)
		}
		// Starts are uniform over 2×records keys: about 1.2% of the
		// reads are lost past the end.
		if scan.Ops != ops || scan.ScanEntries < 95 || scan.ScanEntries > 100 {
			t.Errorf("%s scan: %d ops, %.1f records per scan; want %d and about 100", eng, scan.Ops, scan.ScanEntries, ops)
		}
	}
	if !slices.ContainsFunc(rep.Phases, func(p Phase) bool { return p.Workload == "load" }) {
		t.Fatal("no load phase")
	}
}

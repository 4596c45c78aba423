package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/bench/lsmbench"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/volume"
)

func runNearstore(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot(&globals{})
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return out.String(), err
}

// TestLSMCommands drives "nearstore lsm" through a store's life: each
// command opens and closes the store, so every step also checks recovery.
func TestLSMCommands(t *testing.T) {
	runLSMSteps(t, "--dir", t.TempDir())
}

// lsmLife is a store's life as both TestLSMCommands and
// TestLSMCommandsOffloadfs drive it; want is a command's output, or
// "error" for a failing command.
var lsmLife = []struct {
	args []string
	want string
}{
	{[]string{"put", "b", "2"}, ""},
	{[]string{"put", "a", "1"}, ""},
	{[]string{"put", "c", "3"}, ""},
	{[]string{"get", "b"}, "2\n"},
	{[]string{"get", "b", "--json"}, "{\"key\":\"b\",\"value\":\"2\"}\n"},
	{[]string{"del", "b"}, ""},
	{[]string{"get", "b"}, "error"},
	{[]string{"scan"}, "a\t1\nc\t3\n"},
	{[]string{"scan", "--reverse", "--limit", "1"}, "c\t3\n"},
	{[]string{"put", "d", "4"}, ""},
	{[]string{"del", "c", "d"}, ""},
	{[]string{"compact"}, ""},
	{[]string{"put", "e", "5"}, ""}, // left in the log: get and scan replay it
	{[]string{"scan", "--json"}, "{\"key\":\"a\",\"value\":\"1\"}\n{\"key\":\"d\",\"value\":\"4\"}\n{\"key\":\"e\",\"value\":\"5\"}\n"},
	{[]string{"get", "e"}, "5\n"},
}

// runLSMSteps runs lsmLife, each command with the flag naming the store
// (--dir or --fs-dir) set to where, then checks that stats reports
// levels.
func runLSMSteps(t *testing.T, flag, where string) {
	t.Helper()
	for _, s := range lsmLife {
		out, err := runNearstore(t, append(append([]string{"lsm"}, s.args...), flag, where)...)
		if s.want == "error" {
			if err == nil {
				t.Fatalf("lsm %v succeeded", s.args)
			}
			continue
		}
		if err != nil || out != s.want {
			t.Fatalf("lsm %v = %q, %v; want %q", s.args, out, err, s.want)
		}
	}
	out, err := runNearstore(t, "lsm", "stats", "--json", flag, where)
	if err != nil || !strings.Contains(out, "\"Levels\"") {
		t.Fatalf("stats: %v\n%s", err, out)
	}
}

// TestLSMCommandsOffloadfs drives "nearstore lsm --fs-dir" against a
// real target: the store lives in a directory of offloadfs, writes mount
// it read-write, reads read-only without changing a file, and every step
// reopens the store, so each value read back has survived a remount.
func TestLSMCommandsOffloadfs(t *testing.T) {
	const nqn = "nqn.2026-11.io.nearstore:lsmcli"
	v, err := volume.Open("mem:128MiB")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	srv := testtarget.Start(t, testtarget.Config{NQN: nqn, Name: "lsmcli", Volume: v})
	t.Cleanup(srv.Stop)
	t.Setenv("NEARSTORE_ADDR", srv.Addr())
	t.Setenv("NEARSTORE_NQN", nqn)
	if out, err := runNearstore(t, "fs", "mkfs"); err != nil {
		t.Fatalf("fs mkfs: %v\n%s", err, out)
	}
	if _, err := runNearstore(t, "lsm", "get", "a", "--fs-dir", "/db"); err == nil || !strings.Contains(err.Error(), "no store in /db") {
		t.Fatalf("get before any put: %v; want no store in /db", err)
	}
	runLSMSteps(t, "--fs-dir", "/db")
	// Reads change nothing on the target: the same files, the same sizes.
	before, err := runNearstore(t, "fs", "ls", "-l", "/db")
	if err != nil {
		t.Fatalf("fs ls: %v", err)
	}
	for _, args := range [][]string{{"get", "a"}, {"scan"}, {"stats"}} {
		if out, err := runNearstore(t, append(append([]string{"lsm"}, args...), "--fs-dir", "/db")...); err != nil {
			t.Fatalf("lsm %v: %v\n%s", args, err, out)
		}
	}
	if after, err := runNearstore(t, "fs", "ls", "-l", "/db"); err != nil || after != before {
		t.Fatalf("reads changed /db: %v\nbefore:\n%s\nafter:\n%s", err, before, after)
	}
	if _, err := runNearstore(t, "lsm", "scan", "--fs-dir", "/db", "--dir", t.TempDir()); err == nil {
		t.Fatal("--dir with --fs-dir succeeded")
	}

	// While this host holds the file system read-write, reads still run
	// and writes are refused.
	c := &conn{addr: srv.Addr(), nqn: nqn, nsid: 1}
	s, err := fsMount(t.Context(), &globals{}, c, fsMountOpts{rw: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if out, err := runNearstore(t, "lsm", "get", "a", "--fs-dir", "/db"); err != nil || out != "1\n" {
		t.Fatalf("get beside a read-write mount = %q, %v", out, err)
	}
	// Refused by this machine's lock, or (with no stable host identity,
	// each run a host of its own) by the target's reservation.
	if _, err := runNearstore(t, "lsm", "put", "f", "6", "--fs-dir", "/db"); err == nil ||
		!strings.Contains(err.Error(), "mounted read-write") && !strings.Contains(err.Error(), "owns the file system") {
		t.Fatalf("put beside a read-write mount: %v; want it refused", err)
	}
}

// TestBenchLSMCommand runs "bench lsm" at a tiny size with every YCSB
// workload: both engines run, every read and scan finds its keys (D and
// E's inserts included), every phase has throughput, space
// amplification and CPU per op, the report has the four bars, and --plot
// writes a PNG.
func TestBenchLSMCommand(t *testing.T) {
	if _, err := runNearstore(t, "bench", "lsm", "--workloads", "A,G"); err == nil || !strings.Contains(err.Error(), "G") {
		t.Fatalf("--workloads A,G: %v; want it refused", err)
	}
	// db_bench's workloads, as a table: both engines, each workload, the
	// p99.9 column.
	out, err := runNearstore(t, "bench", "lsm", "--records", "1000", "--ops", "500", "--repeat", "1",
		"--memtable", "1048576", "--workloads", "fillrandom,readrandom,scan", "--dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, eng := range []string{"kv/lsm", "pebble"} {
		for _, wl := range []string{"load", "fillrandom", "readrandom", "scan"} {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(eng) + ` +` + wl + ` +[0-9]`).MatchString(out) {
				t.Fatalf("no %s %s row in\n%s", eng, wl, out)
			}
		}
	}
	if !strings.Contains(out, "p99.9 µs") {
		t.Fatalf("no p99.9 column in\n%s", out)
	}
	plotFile := filepath.Join(t.TempDir(), "lsm.png")
	out, err = runNearstore(t, "bench", "lsm", "--records", "3000", "--ops", "3000", "--repeat", "2",
		"--memtable", "1048576", "--workloads", "all", "--dir", t.TempDir(), "--json", "--plot", plotFile)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(plotFile)
	if err != nil {
		t.Fatalf("--plot wrote no file: %v", err)
	}
	defer f.Close()
	if cfg, err := png.DecodeConfig(f); err != nil || cfg.Width < 500 {
		t.Fatalf("--plot %s: %v, %+v", plotFile, err, cfg)
	}
	var rep lsmbench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Runs) != 2 || len(rep.Phases) != 14 || len(rep.Bars) != 4 {
		t.Fatalf("report %+v", rep)
	}
	for _, p := range rep.Phases {
		if p.OpsPerSec <= 0 || p.SpaceAmp <= 0 || p.CPUus <= 0 || (p.Workload == "load" && p.WriteAmp <= 0) ||
			p.P50us <= 0 || p.P99us < p.P50us || p.P999us < p.P99us {
			t.Fatalf("phase %+v", p)
		}
	}
}

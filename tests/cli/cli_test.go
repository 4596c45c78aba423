// Package cli_test checks the nearstore binary as a storage admin meets
// it at a shell: against a real target on a loopback port, each command
// run as its own process, judged by what it prints and its exit code.
package cli_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/volume"
)

const testNQN = "nqn.2026-11.io.nearstore:cli"

func TestMain(m *testing.M) { clitest.Main(m) }

// newTarget starts a target with one 512 MiB memory namespace (allocated
// as written) and returns
// its address.
func newTarget(t *testing.T) string {
	t.Helper()
	v, err := volume.Open("mem:512MiB")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	srv := testtarget.Start(t, testtarget.Config{NQN: testNQN, Name: "cli", Volume: v,
		Runtimes: func() ([]sandbox.Runtime, error) {
			w, err := wasm.NewRuntime(context.Background(), wasm.Options{})
			return []sandbox.Runtime{w, ebpf.NewRuntime(ebpf.Options{})}, err
		},
	})
	t.Cleanup(srv.Stop)
	return srv.Addr()
}

// TestConnectErrors: a subsystem NQN the target does not serve is named
// as such, with the ones it does serve; the address and NQN can come from
// the environment; a transfer beyond MDTS is refused up front, naming
// MDTS.
func TestConnectErrors(t *testing.T) {
	addr := newTarget(t)
	r := clitest.Run(t, time.Minute, nil, nil, "io", "verify", "-a", addr, "-n", "nqn.2026-11.io.nearstore:nope", "--size", "1MiB")
	want := "no subsystem nqn.2026-11.io.nearstore:nope at " + addr + "; it serves: " + testNQN
	if r.Code != 1 || !strings.Contains(r.Stderr, want) {
		t.Fatalf("wrong NQN: exit %d, stderr %q; want exit 1 and %q", r.Code, r.Stderr, want)
	}
	if strings.Contains(r.Stderr, "queue failed") {
		t.Fatalf("wrong NQN: the error is said twice, once as a warning:\n%s", r.Stderr)
	}
	env := []string{"NEARSTORE_ADDR=" + addr, "NEARSTORE_NQN=" + testNQN}
	if r := clitest.Run(t, time.Minute, nil, env, "io", "verify", "--size", "1MiB"); r.Code != 0 || !strings.Contains(r.Stdout, "checks passed") {
		t.Fatalf("io verify with NEARSTORE_ADDR/NQN: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = clitest.Run(t, time.Minute, nil, env, "io", "bench", "--bs", "1m", "--duration", "1s", "--quiet")
	if r.Code != 1 || !strings.Contains(r.Stderr, "MDTS") {
		t.Fatalf("io bench --bs 1m: exit %d, stderr %q; want exit 1 naming MDTS", r.Code, r.Stderr)
	}
}

// TestInterrupt: SIGINT stops io bench and io verify, which print what
// they measured or checked so far and exit 130; SIGTERM exits 143.
func TestInterrupt(t *testing.T) {
	addr := newTarget(t)
	tgt := []string{"-a", addr, "-n", testNQN}
	cases := []struct {
		name   string
		args   []string
		sig    syscall.Signal
		code   int
		stdout string
	}{
		{"bench SIGINT", []string{"io", "bench", "--duration", "10m", "--quiet"}, syscall.SIGINT, 130, "IOPS"},
		{"bench SIGTERM", []string{"io", "bench", "--duration", "10m", "--quiet"}, syscall.SIGTERM, 143, "IOPS"},
		{"verify SIGINT", []string{"io", "verify", "--size", "512MiB"}, syscall.SIGINT, 130, "verify: interrupted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(clitest.Binary(t), append(tc.args, tgt...)...)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			// Long enough to have connected and measured something; the
			// outcome does not depend on how long.
			time.Sleep(time.Second)
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-exited:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("still running 30 s after %v\n%s", tc.sig, errOut.String())
			}
			ee, _ := err.(*exec.ExitError)
			if ee == nil || ee.ExitCode() != tc.code {
				t.Fatalf("after %v: %v, want exit %d\n%s", tc.sig, err, tc.code, errOut.String())
			}
			if !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errOut.String(), "interrupted") {
				t.Fatalf("after %v: stdout %q, stderr %q; want %q and a word that it was interrupted", tc.sig, out.String(), errOut.String(), tc.stdout)
			}
		})
	}
}

// TestUsage: a command line the binary cannot run exits 2 with a reason,
// never help with exit 0; counts parse like sizes; version and --version
// print the build; fs ls -lh lists with human-readable sizes (-h is not
// help there).
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr for failures, stdout for successes
	}{
		{[]string{"fs", "lss"}, 2, `unknown command "lss" for "nearstore fs"`},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"--log-level", "bogus", "version"}, 2, `--log-level "bogus"`},
		{[]string{"io", "verify", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"io", "bench", "--qd", "x"}, 2, `invalid argument "x" for "--qd"`},
		{[]string{"fs", "ls", "a", "b"}, 2, "accepts at most 1 arg"},
		{[]string{"kv", "load", "--keys", "lots"}, 1, `bad count "lots"`},
		{[]string{"version"}, 0, "nearstore "},
		{[]string{"--version"}, 0, "nearstore "},
		{[]string{"fs", "--help"}, 0, "Usage:"},
	} {
		r := clitest.Run(t, time.Minute, nil, nil, tc.args...)
		got := r.Stderr
		if tc.code == 0 {
			got = r.Stdout
		}
		if r.Code != tc.code || !strings.Contains(got, tc.want) {
			t.Errorf("nearstore %s: exit %d, stdout %q, stderr %q; want exit %d and %q",
				strings.Join(tc.args, " "), r.Code, r.Stdout, r.Stderr, tc.code, tc.want)
		}
	}

	addr := newTarget(t)
	run := runOK(t, addr)
	run("", "fs", "mkfs")
	run(strings.Repeat("x", 3<<20), "fs", "put", "-", "/big")
	if out := run("", "fs", "ls", "-lh"); !strings.Contains(out, "3 MiB") || !strings.Contains(out, "big") {
		t.Fatalf("fs ls -lh: %q", out)
	}
}

// TestJSON: --json output is snake_case and one object (or array) per
// command, on discover and the kv lookups; fsck's exit codes are
// e2fsck's.
func TestJSON(t *testing.T) {
	addr := newTarget(t)
	tgt := []string{"-a", addr, "-n", testNQN}
	run := func(args ...string) string {
		t.Helper()
		r := clitest.Run(t, 2*time.Minute, nil, nil, args...)
		if r.Code != 0 {
			t.Fatalf("nearstore %s: exit %d\n%s", strings.Join(args, " "), r.Code, r.Stderr)
		}
		return r.Stdout
	}
	var disc []map[string]any
	if err := json.Unmarshal([]byte(run("discover", "-a", addr, "--json")), &disc); err != nil {
		t.Fatal(err)
	}
	if len(disc) != 1 || disc[0]["subnqn"] != testNQN || disc[0]["trtype"] != "tcp" {
		t.Fatalf("discover --json: %v", disc)
	}

	run(append([]string{"kv", "load", "--mkfs", "--keys", "1000"}, tgt...)...)
	var get struct {
		Mode    string `json:"mode"`
		Entries []struct {
			Key   uint64 `json:"key"`
			Found bool   `json:"found"`
			Value string `json:"value"`
		} `json:"entries"`
		RoundTrips uint64 `json:"round_trips"`
	}
	r := clitest.Run(t, time.Minute, nil, nil, append([]string{"kv", "get", "--json", "4", "999999"}, tgt...)...)
	if r.Code != 1 {
		t.Fatalf("kv get of a missing key: exit %d, want 1\n%s", r.Code, r.Stderr)
	}
	if err := json.Unmarshal([]byte(r.Stdout), &get); err != nil {
		t.Fatalf("kv get --json: %v\n%s", err, r.Stdout)
	}
	if get.Mode != "pushdown" || len(get.Entries) != 2 || !get.Entries[0].Found || get.Entries[0].Value == "" ||
		get.Entries[1].Found || get.RoundTrips == 0 {
		t.Fatalf("kv get --json: %+v", get)
	}

	// put replaces a value durably; a key the tree lacks is refused.
	run(append([]string{"kv", "put", "4", "hello"}, tgt...)...)
	r = clitest.Run(t, time.Minute, nil, nil, append([]string{"kv", "get", "--json", "4"}, tgt...)...)
	if err := json.Unmarshal([]byte(r.Stdout), &get); err != nil || len(get.Entries) != 1 || !strings.HasPrefix(get.Entries[0].Value, "68656c6c6f00") {
		t.Fatalf("kv get after kv put: %+v (%v)", get, err)
	}
	if r := clitest.Run(t, time.Minute, nil, nil, append([]string{"kv", "put", "5", "x"}, tgt...)...); r.Code != 1 || !strings.Contains(r.Stderr, "cannot add keys") {
		t.Fatalf("kv put of a missing key: exit %d, %q", r.Code, r.Stderr)
	}
	if r := clitest.Run(t, time.Minute, nil, nil, append([]string{"fs", "fsck"}, tgt...)...); r.Code != 0 {
		t.Fatalf("fsck of a clean file system: exit %d\n%s", r.Code, r.Stderr)
	}
	if r := clitest.Run(t, time.Minute, nil, nil, "fs", "fsck", "-a", "127.0.0.1:1", "-n", testNQN); r.Code != 8 {
		t.Fatalf("fsck that cannot reach its target: exit %d, want 8 (operational error)\n%s", r.Code, r.Stderr)
	}
}

// TestFunc: functions are loaded and called by a standard name or an ID
// prefix; call takes sizes with suffixes, decodes a standard function's
// output, writes --out even with --json, and tells a user who calls a
// compute-only function as pushdown which mode to use.
func TestFunc(t *testing.T) {
	addr := newTarget(t)
	env := []string{"NEARSTORE_ADDR=" + addr, "NEARSTORE_NQN=" + testNQN}
	run := func(code int, args ...string) clitest.Result {
		t.Helper()
		r := clitest.Run(t, time.Minute, nil, env, args...)
		if r.Code != code {
			t.Fatalf("nearstore %s: exit %d, want %d\n%s%s", strings.Join(args, " "), r.Code, code, r.Stdout, r.Stderr)
		}
		return r
	}
	// Known input: 1 MiB of u64s 0, 1, 2, ... through the raw namespace.
	in := make([]byte, 1<<20)
	for i := range len(in) / 8 {
		binary.LittleEndian.PutUint64(in[8*i:], uint64(i))
	}
	f := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(f, in, 0o644); err != nil {
		t.Fatal(err)
	}
	ctrl, ns := testhost.Connect(t, addr, testNQN, 1, host.Options{})
	if _, err := ns.WriteAt(in, 0); err != nil {
		t.Fatal(err)
	}
	ctrl.Close()

	id := strings.TrimSpace(run(0, "func", "load", "stats64").Stdout)
	if list := run(0, "func", "list").Stdout; !strings.Contains(list, id) || !strings.Contains(list, "stats64") {
		t.Fatalf("func list does not name stats64:\n%s", list)
	}
	n := uint64(1 << 17)
	want := fmt.Sprintf("count %d\nsum %d\nmin 0\nmax %d\n", n, n*(n-1)/2, n-1)
	if got := run(0, "func", "call", "stats64", "--mode", "lambda-read", "--length", "1MiB").Stdout; got != want {
		t.Fatalf("func call stats64: %q, want %q", got, want)
	}
	out := filepath.Join(t.TempDir(), "stats.bin")
	var js struct {
		Out   string `json:"out"`
		Bytes int    `json:"output_bytes"`
	}
	if err := json.Unmarshal([]byte(run(0, "func", "call", id[:8], "--mode", "lambda-read", "--length", "1MiB", "--json", "--out", out).Stdout), &js); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(out); err != nil || len(b) != 32 || js.Out != out || js.Bytes != 32 {
		t.Fatalf("--json --out: %d bytes in the file (%v), JSON %+v", len(b), err, js)
	}
	if r := run(1, "func", "call", "stats64", "--length", "4k"); !strings.Contains(r.Stderr, "--mode lambda-read") {
		t.Fatalf("a compute-only function called as pushdown: %q; want a hint to use --mode lambda-read", r.Stderr)
	}
	run(0, "func", "load", "--kind", "ebpf", "stats64")
	if r := run(2, "func", "call", "stats64", "--mode", "lambda-read"); !strings.Contains(r.Stderr, "give an ID") {
		t.Fatalf("an ambiguous name: %q", r.Stderr)
	}
	run(0, "func", "unload", id[:6])
	if list := run(0, "func", "list").Stdout; strings.Contains(list, id) {
		t.Fatalf("unloaded by prefix, still listed:\n%s", list)
	}
	run(1, "func", "call", id[:8])
}

// runOK returns a function that runs nearstore against the target at
// addr with stdin and args, fails the test unless it exits 0, and returns
// its stdout.
func runOK(t *testing.T, addr string) func(stdin string, args ...string) string {
	tgt := []string{"-a", addr, "-n", testNQN}
	return func(stdin string, args ...string) string {
		t.Helper()
		r := clitest.Run(t, time.Minute, strings.NewReader(stdin), nil, append(args, tgt...)...)
		if r.Code != 0 {
			t.Fatalf("nearstore %s: exit %d\n%s", strings.Join(args, " "), r.Code, r.Stderr)
		}
		return r.Stdout
	}
}

// Package cli_test checks the nearstore binary as a storage admin meets
// it at a shell: against a real target on a loopback port, each command
// run as its own process, judged by what it prints and its exit code.
package cli_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/volume"
)

const testNQN = "nqn.2026-11.io.nearstore:cli"

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
			return []sandbox.Runtime{ebpf.NewRuntime(ebpf.Options{})}, nil
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
	tgt := []string{"-a", addr, "-n", testNQN}
	run := func(stdin string, args ...string) string {
		t.Helper()
		r := clitest.Run(t, time.Minute, strings.NewReader(stdin), nil, append(args, tgt...)...)
		if r.Code != 0 {
			t.Fatalf("nearstore %s: exit %d\n%s", strings.Join(args, " "), r.Code, r.Stderr)
		}
		return r.Stdout
	}
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

	if r := clitest.Run(t, time.Minute, nil, nil, append([]string{"fs", "fsck"}, tgt...)...); r.Code != 0 {
		t.Fatalf("fsck of a clean file system: exit %d\n%s", r.Code, r.Stderr)
	}
	if r := clitest.Run(t, time.Minute, nil, nil, "fs", "fsck", "-a", "127.0.0.1:1", "-n", testNQN); r.Code != 8 {
		t.Fatalf("fsck that cannot reach its target: exit %d, want 8 (operational error)\n%s", r.Code, r.Stderr)
	}
}

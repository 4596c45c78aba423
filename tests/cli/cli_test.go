// Package cli_test checks the nearstore binary as a storage admin meets
// it at a shell: against a real target on a loopback port, each command
// run as its own process, judged by what it prints and its exit code.
package cli_test

import (
	"bytes"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/testtarget"
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
	srv := testtarget.Start(t, testtarget.Config{NQN: testNQN, Name: "cli", Volume: v})
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

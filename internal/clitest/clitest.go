// Package clitest runs the nearstore binary in tests: it builds it once
// per test process and runs commands as separate processes, returning
// what they printed and their exit code, so tests check what a user at a
// shell sees.
package clitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The binary is built once per test process, on first use.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func build() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nearstore-clitest-")
		if err != nil {
			buildErr = err
			return
		}
		bin := filepath.Join(dir, "nearstore")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/nearstore/nearstore/cmd/nearstore").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		binPath = bin
	})
	return binPath, buildErr
}

// Cleanup removes the built binary, if a test built one; call it from
// TestMain after m.Run.
func Cleanup() {
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
}

// Main is a test package's whole TestMain when its only duty is the
// built binary: it runs the tests, removes the binary (Cleanup) and
// exits with the tests' code. os.Exit skips deferred calls, so the
// removal must come between m.Run and the exit, which is why it lives here
// once rather than in every package.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// Binary returns the path of the built binary; the test fails if it does
// not build.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := build()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Result is what a finished command printed and how it exited.
type Result struct {
	Stdout, Stderr string
	Code           int // the exit code; -1 if killed by a signal
}

// Run runs the binary with args and stdin (nil for none), with env added
// to the test process's environment, and waits up to timeout.
func Run(t testing.TB, timeout time.Duration, stdin io.Reader, env []string, args ...string) Result {
	t.Helper()
	bin := Binary(t) // built before the clock starts: timeout is the command's
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &o, &e
	err := cmd.Run()
	r := Result{Stdout: o.String(), Stderr: e.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("nearstore %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("nearstore %s: still running after %v\nstderr: %s", strings.Join(args, " "), timeout, e.String())
	}
	return r
}

// Serve runs the binary with args as its own process until the test
// ends and waits until it accepts connections on addr; the test fails,
// showing what it printed to stderr, if it exits first or does not
// listen within 30 seconds. The returned channel is closed when the
// process exits, so a test can check that a server outlived it.
func Serve(t testing.TB, addr string, args ...string) (exited <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return done
		}
		select {
		case <-done:
			t.Fatalf("nearstore %s exited before listening:\n%s", strings.Join(args, " "), stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if i == 600 {
			t.Fatalf("nearstore %s never listened", strings.Join(args, " "))
		}
	}
}

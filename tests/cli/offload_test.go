package cli_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/testproc"
)

// TestOffload: a peer engine started with offload serve runs a copy for
// offload run, whose output reads back as the inputs end to end; a task
// whose output directory is missing fails before anything runs and
// leaves the file system clean; offload engines lists the engine.
func TestOffload(t *testing.T) {
	tgt, run := offloadFS(t)

	eaddr := startEngine(t, tgt, "--host-nqn", "nqn.2026-11.io.nearstore:offload:cli")

	got := run("", "offload", "run", "copy", "--engine", eaddr, "--in", "/a", "--in", "/b", "--out", "/ab:64KiB")
	if !strings.Contains(got, "ran on the engine") || !strings.Contains(got, "/ab: 13 bytes") {
		t.Fatalf("offload run: %q", got)
	}
	if cat := run("", "fs", "cat", "/ab"); cat != "first\nsecond\n" {
		t.Fatalf("fs cat /ab: %q", cat)
	}
	r := clitest.Run(t, time.Minute, nil, nil, append([]string{"offload", "run", "copy", "--engine", eaddr, "--in", "/a", "--out", "/no/such:4KiB"}, tgt...)...)
	if r.Code != 1 || !strings.Contains(r.Stderr, "no such file or directory") {
		t.Fatalf("an output in a missing directory: exit %d, stderr %q", r.Code, r.Stderr)
	}
	run("", "fs", "fsck")

	var engines []map[string]any
	r = clitest.Run(t, time.Minute, nil, nil, "offload", "engines", "--engine", eaddr, "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &engines); r.Code != 0 || err != nil {
		t.Fatalf("offload engines --json: exit %d, %v\n%s", r.Code, err, r.Stderr)
	}
	if len(engines) != 1 || engines[0]["host_nqn"] != "nqn.2026-11.io.nearstore:offload:cli" || engines[0]["policy"] != "none" {
		t.Fatalf("offload engines --json: %v", engines)
	}
}

// TestOffloadWasm: offload run --module sends a wasm task to a peer
// engine process (offload serve, with a 2s task timeout): it copies; a
// module reading past its file's end, or writing into its input, is told
// no (its status, -1, is its output) and changes nothing; a module that
// never ends is stopped and leaves no output. The file system stays
// clean and the committed files intact throughout.
func TestOffloadWasm(t *testing.T) {
	tgt, run := offloadFS(t)
	module := filepath.Join("..", "..", "offload", "testdata", "wasm", "task.wasm")

	eaddr := startEngine(t, tgt, "--task-timeout", "2s", "--host-nqn", "nqn.2026-11.io.nearstore:offload:cli-wasm")
	intact := func() {
		t.Helper()
		if a, b := run("", "fs", "cat", "/a"), run("", "fs", "cat", "/b"); a != "first\n" || b != "second\n" {
			t.Fatalf("committed files changed: %q %q", a, b)
		}
		run("", "fs", "fsck")
	}

	got := run("", "offload", "run", "wasm-copy", "--module", module, "--args", "c", "--engine", eaddr,
		"--in", "/a", "--in", "/b", "--out", "/ab:64KiB")
	if !strings.Contains(got, "ran on the engine") || !strings.Contains(got, "/ab: 13 bytes") {
		t.Fatalf("offload run --module (copy): %q", got)
	}
	if cat := run("", "fs", "cat", "/ab"); cat != "first\nsecond\n" {
		t.Fatalf("fs cat /ab: %q", cat)
	}
	for _, mode := range []string{"r", "w"} { // read past the end; write the input
		got := run("", "offload", "run", "wasm-hostile", "--module", module, "--args", mode, "--engine", eaddr,
			"--in", "/a", "--out", "/hostile:4KiB")
		if !strings.Contains(got, "output ffffffff") {
			t.Fatalf("mode %s: %q, want status -1 (outside the grant)", mode, got)
		}
	}
	intact()

	r := clitest.Run(t, time.Minute, nil, nil, append([]string{"offload", "run", "wasm-spin", "--module", module, "--args", "s",
		"--engine", eaddr, "--in", "/a", "--out", "/spun:4KiB"}, tgt...)...)
	if r.Code == 0 || !strings.Contains(r.Stderr, "run has ended") {
		t.Fatalf("a module that never ends: exit %d, stderr %q", r.Code, r.Stderr)
	}
	if r := clitest.Run(t, time.Minute, nil, nil, append([]string{"fs", "stat", "/spun"}, tgt...)...); r.Code == 0 {
		t.Fatalf("the output of a module that never ended exists: %q", r.Stdout)
	}
	intact()
}

// startEngine starts `nearstore offload serve` on a free port with args
// and the target's flags, stopped at the test's end, and returns its
// address.
func startEngine(t *testing.T, tgt []string, args ...string) string {
	t.Helper()
	engine := exec.Command(clitest.Binary(t), append(append([]string{"offload", "serve", "--listen", "127.0.0.1:0"}, args...), tgt...)...)
	engine.Stderr = io.Discard
	line, ok := <-testproc.Start(t, engine).Lines
	if !ok {
		t.Fatal("offload serve printed nothing")
	}
	// "offload engine on ADDR, reaching ..."
	return strings.TrimSuffix(strings.Fields(line)[3], ",")
}

// offloadFS starts a target with a fresh file system holding /a
// ("first\n") and /b ("second\n"), and returns the flags that name it
// and runOK's runner for it.
func offloadFS(t *testing.T) ([]string, func(stdin string, args ...string) string) {
	t.Helper()
	addr := newTarget(t)
	run := runOK(t, addr)
	run("", "fs", "mkfs")
	run("first\n", "fs", "put", "-", "/a")
	run("second\n", "fs", "put", "-", "/b")
	return []string{"-a", addr, "-n", testNQN}, run
}

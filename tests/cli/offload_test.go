package cli_test

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/clitest"
)

// TestOffload: a peer engine started with offload serve runs a copy for
// offload run, whose output reads back as the inputs end to end; a task
// whose output directory is missing fails before anything runs and
// leaves the file system clean; offload engines lists the engine.
func TestOffload(t *testing.T) {
	addr := newTarget(t)
	tgt := []string{"-a", addr, "-n", testNQN}
	run := runOK(t, addr)
	run("", "fs", "mkfs")
	run("first\n", "fs", "put", "-", "/a")
	run("second\n", "fs", "put", "-", "/b")

	engine := exec.Command(clitest.Binary(t), append([]string{"offload", "serve", "--listen", "127.0.0.1:0",
		"--host-nqn", "nqn.2026-11.io.nearstore:offload:cli"}, tgt...)...)
	out, err := engine.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		engine.Process.Kill()
		engine.Wait()
	})
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatal("offload serve printed nothing")
	}
	// "offload engine on ADDR, reaching ..."
	eaddr := strings.TrimSuffix(strings.Fields(sc.Text())[3], ",")

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

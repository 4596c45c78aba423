// Package readme_test walks README.md the way a new user does: it takes
// every ```sh block in order and runs it, as one bash session, from the
// repository's root, against the real binary and a real target. So
// README's commands stay true: a flag renamed, a path that does not
// exist, a second server on a busy port or a command that needs a step
// README does not show fails this test.
//
// Skipped, and only these: blocks that need a Linux kernel's NVMe/TCP
// host (they load nvme-tcp or run `nvme connect`; tests/interop runs
// them under QEMU), and the line `make test`, which is what runs this.
package readme_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// block is one ```sh block of README.md.
type block struct {
	line int // of its opening fence
	text string
}

// shellBlocks returns README's ```sh blocks in order.
func shellBlocks(t *testing.T, readme string) []block {
	t.Helper()
	f, err := os.Open(readme)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out []block
		cur *block
	)
	s := bufio.NewScanner(f)
	for n := 1; s.Scan(); n++ {
		l := s.Text()
		switch {
		case cur == nil && strings.TrimSpace(l) == "```sh":
			cur = &block{line: n}
		case cur != nil && strings.TrimSpace(l) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("README.md:%d: a ```sh block is never closed", cur.line)
	}
	return out
}

// needsKernel reports whether a block drives a Linux kernel's NVMe/TCP
// host.
func needsKernel(b block) bool {
	return strings.Contains(b.text, "modprobe ") || strings.Contains(b.text, "nvme connect")
}

// script is the blocks as one bash script: each block's lines run as
// written, with `make test` left out, and every background job README
// starts stopped at the end.
func script(blocks []block) string {
	var sb strings.Builder
	sb.WriteString("set -euo pipefail\n")
	sb.WriteString("trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n")
	for _, b := range blocks {
		fmt.Fprintf(&sb, "echo '### README.md:%d' >&2\n", b.line)
		for l := range strings.SplitSeq(strings.TrimRight(b.text, "\n"), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "make test") {
				l = "# (skipped: " + strings.TrimSpace(l) + ")"
			}
			sb.WriteString(l + "\n")
		}
	}
	return sb.String()
}

// goEnv returns what `go env NAME` prints.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("walks the whole README: minutes")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// README's target listens on the usual ports; another process there
	// would make its commands talk to something else.
	for _, addr := range []string{"127.0.0.1:4420", "127.0.0.1:9100"} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Skipf("%s is in use here; README's target listens there", addr)
		}
	}
	var run []block
	for _, b := range shellBlocks(t, filepath.Join(root, "README.md")) {
		if needsKernel(b) {
			t.Logf("README.md:%d: skipped: needs a Linux kernel's NVMe/TCP host (tests/interop runs it)", b.line)
			continue
		}
		run = append(run, b)
	}
	if len(run) < 5 {
		t.Fatalf("README.md has %d runnable shell blocks; the walk-through has gone", len(run))
	}
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script(run))
	cmd.Dir = root
	// A new user's home, with the Go caches kept where they are.
	cmd.Env = append(os.Environ(), "HOME="+home,
		"GOCACHE="+goEnv(t, "GOCACHE"), "GOMODCACHE="+goEnv(t, "GOMODCACHE"), "GOPATH="+goEnv(t, "GOPATH"))
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README's commands failed: %v\n%s", err, tail(string(out), 8000))
	}
	// Every block started (set -e stops at the first failure, and the
	// exit code says so; this catches a script that stopped early with
	// status 0).
	if got := strings.Count(string(out), "### README.md:"); got != len(run) {
		t.Fatalf("%d of README's %d blocks ran\n%s", got, len(run), tail(string(out), 8000))
	}
	for _, want := range []string{"checks passed", "IOPS", "count 131072", "fsck: clean", "docs/README.md"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("README's commands never printed %q", want)
		}
	}
	t.Logf("README's %d blocks ran; the last lines:\n%s", len(run), tail(string(out), 2000))
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

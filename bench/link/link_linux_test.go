package link

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nearstore/nearstore/bench/proc"
)

// fallbackChildEnv marks the test binary's run as the unprivileged child
// of TestLinkFallbackUnprivileged.
const fallbackChildEnv = "NEARSTORE_LINK_FALLBACK_CHILD"

// TestLinkFallbackUnprivileged opens a link as a user who may not make
// network namespaces: it must fall back to loopback, say why, and warn.
// As root it runs itself again as nobody; as anyone else it is already
// unprivileged.
func TestLinkFallbackUnprivileged(t *testing.T) {
	if os.Getenv(fallbackChildEnv) != "" || os.Geteuid() != 0 {
		checkUnprivilegedFallback(t)
		return
	}
	// The child binary must be reachable by nobody: copy it to a
	// directory anyone may enter.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// (t.TempDir's parent is private to root.)
	dir, err := os.MkdirTemp("", "nearstore-link-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "bench.test")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), exe, "-test.run", "^TestLinkFallbackUnprivileged$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), fallbackChildEnv+"=1", "HOME="+dir, "GOCOVERDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unprivileged child: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestLinkFallbackUnprivileged")) {
		t.Fatalf("unprivileged child did not pass:\n%s", out)
	}
	t.Logf("unprivileged child:\n%s", out)
}

func checkUnprivilegedFallback(t *testing.T) {
	var logBuf bytes.Buffer
	l, err := Open(t.Context(), "10gbit", slog.New(slog.NewTextHandler(&logBuf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Shaped() {
		t.Skip("this user may make network namespaces; nothing to fall back from")
	}
	if l.Fallback() == "" || l.TargetIP() != "127.0.0.1" || l.Rate() != "" || l.Netns() != "" {
		t.Errorf("fallback link: fallback %q target %q rate %q netns %q", l.Fallback(), l.TargetIP(), l.Rate(), l.Netns())
	}
	if !strings.Contains(l.String(), "loopback (asked for 10gbit: ") {
		t.Errorf("String() = %q", l.String())
	}
	if !strings.Contains(logBuf.String(), "level=WARN") || !strings.Contains(logBuf.String(), "reason=") {
		t.Errorf("fallback not logged at warn: %s", logBuf.String())
	}
	// A fallback link still works as loopback.
	exchange(t, l, 1<<16)
	t.Logf("fallback: %s", l.Fallback())
}

// TestLinkCleansStale leaves a namespace and veth pair as a process that
// died with its link open would, and checks the next Open removes
// them.
func TestLinkCleansStale(t *testing.T) {
	probe := openShaped(t, "1gbit")
	if err := probe.Close(); err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("/bin/sh", "-c", "exit 0")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	netns := netnsPrefix + strconv.Itoa(dead.Process.Pid) + "-beef"
	dev := hostDevName(netns)
	ip, err := proc.LookSbin("ip")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"netns", "add", netns},
		{"link", "add", dev, "type", "veth", "peer", "name", "veth0", "netns", netns},
	} {
		if out, err := exec.CommandContext(t.Context(), ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { _ = removeLink(context.Background(), ip, netns, dev) })
	if nsThere, devThere := linkExists(t, netns, dev); !nsThere || !devThere {
		t.Fatalf("stale link not made: netns %v veth %v", nsThere, devThere)
	}
	_ = openShaped(t, "1gbit")
	if nsThere, devThere := linkExists(t, netns, dev); nsThere || devThere {
		t.Errorf("stale link left: netns %s there %v, veth %s there %v", netns, nsThere, dev, devThere)
	}
}

package chain_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/testproc"
)

// TestClusterUp drives the one-command local cluster as a user does:
// "cluster up", then status, put, get and a missing key from other
// processes, then SIGINT stops it cleanly.
func TestClusterUp(t *testing.T) {
	up, endpoint := startUp(t, "--nodes", "3")
	run := func(args ...string) clitest.Result {
		return clitest.Run(t, 60*time.Second, nil, nil, append(args, "--etcd", endpoint)...)
	}
	// The chain is whole once every fresh node has rejoined.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := run("cluster", "status")
		if r.Code == 0 && strings.Count(strings.SplitN(r.Stdout, "\n", 2)[0], "->") == 2 && !strings.Contains(r.Stdout, "joining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed a whole chain: %+v", r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := run("cluster", "put", "hello", "world"); r.Code != 0 {
		t.Fatalf("put: %+v", r)
	}
	for _, args := range [][]string{{"cluster", "get", "hello"}, {"cluster", "get", "--tail", "hello"}} {
		if r := run(args...); r.Code != 0 || r.Stdout != "world\n" {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	if r := run("cluster", "get", "absent"); r.Code != 1 || !strings.Contains(r.Stderr, "absent: not found") {
		t.Fatalf("get absent: %+v", r)
	}
	if r := run("cluster", "put", "onlykey"); r.Code != 2 {
		t.Fatalf("put without a value: %+v", r)
	}
	if r := run("cluster", "put", "--delete", "hello"); r.Code != 0 {
		t.Fatalf("delete: %+v", r)
	}
	if r := run("cluster", "get", "hello"); r.Code != 1 {
		t.Fatalf("get after delete: %+v", r)
	}
	if err := up.Cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-up.Done():
		if st := up.Cmd.ProcessState; !st.Success() {
			t.Fatalf("cluster up after SIGINT: %v", st)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cluster up still running 30s after SIGINT")
	}
}

// startUp starts "cluster up" with args and returns it and its etcd
// endpoint, once it printed every node's line.
func startUp(t *testing.T, args ...string) (*testproc.Proc, string) {
	t.Helper()
	up := exec.Command(clitest.Binary(t), append([]string{"cluster", "up", "--dir", filepath.Join(t.TempDir(), "c"), "--log-level", "warn"}, args...)...)
	p := testproc.Start(t, up)
	t.Cleanup(func() {
		// SIGINT stops the nodes cleanly; kill -9 (testproc's own
		// cleanup) if it hangs.
		up.Process.Signal(syscall.SIGINT)
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
		}
	})
	var endpoint string
	for i := range 4 {
		line, ok := <-p.Lines
		if !ok {
			t.Fatalf("cluster up ended before its line %d", i)
		}
		if i == 0 {
			f := strings.Fields(line)
			if len(f) != 2 || f[0] != "etcd" {
				t.Fatalf("first line %q", line)
			}
			endpoint = f[1]
		} else if !strings.HasPrefix(line, "node n") || !strings.Contains(line, "(pid ") {
			t.Fatalf("line %q", line)
		}
	}
	return p, endpoint
}

// TestClusterUpSharded runs three groups on three nodes: keys spread over
// the groups by the shard map, and put, get, del and scan route by it.
func TestClusterUpSharded(t *testing.T) {
	_, endpoint := startUp(t, "--nodes", "3", "--groups", "3")
	run := func(args ...string) clitest.Result {
		return clitest.Run(t, 60*time.Second, nil, nil, append(args, "--etcd", endpoint)...)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := run("cluster", "status")
		whole := r.Code == 0 && !strings.Contains(r.Stdout, "joining")
		for _, g := range []string{"g0", "g1", "g2"} {
			whole = whole && strings.Contains(r.Stdout, "group "+g+" ") && strings.Count(r.Stdout, "->") == 6
		}
		if whole {
			if !strings.Contains(r.Stdout, `shard ["", "U") group g0`) || !strings.Contains(r.Stdout, `shard ["\xaa", ∞) group g2`) {
				t.Fatalf("status shard map: %s", r.Stdout)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed three whole chains: %+v", r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// One key in each group's range ('U' = 0x55 and 0xaa are the bounds).
	keys := []string{"Apple", "Zebra", "\xc0tail"}
	for _, k := range keys {
		if r := run("cluster", "put", k, "v-"+k); r.Code != 0 {
			t.Fatalf("put %q: %+v", k, r)
		}
	}
	for _, k := range keys {
		if r := run("cluster", "get", k); r.Code != 0 || r.Stdout != "v-"+k+"\n" {
			t.Fatalf("get %q: %+v", k, r)
		}
	}
	if r := run("cluster", "scan"); r.Code != 0 || r.Stdout != "Apple v-Apple\nZebra v-Zebra\n\xc0tail v-\xc0tail\n" {
		t.Fatalf("scan: %+v", r)
	}
	if r := run("cluster", "scan", "B", "\xff", "--limit", "1"); r.Code != 0 || r.Stdout != "Zebra v-Zebra\n" {
		t.Fatalf("scan from B limit 1: %+v", r)
	}
	if r := run("cluster", "scan", "b", "a"); r.Code != 2 {
		t.Fatalf("scan with START above END: %+v", r)
	}
	if r := run("cluster", "del", "Zebra"); r.Code != 0 {
		t.Fatalf("del: %+v", r)
	}
	if r := run("cluster", "get", "Zebra"); r.Code != 1 {
		t.Fatalf("get after del: %+v", r)
	}
	if r := run("cluster", "scan"); r.Code != 0 || r.Stdout != "Apple v-Apple\n\xc0tail v-\xc0tail\n" {
		t.Fatalf("scan after del: %+v", r)
	}
}

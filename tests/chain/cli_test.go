package chain_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/clitest"
)

// TestClusterUp drives the one-command local cluster as a user does:
// "cluster up", then status, put, get and a missing key from other
// processes, then SIGINT stops it cleanly.
func TestClusterUp(t *testing.T) {
	up := exec.Command(clitest.Binary(t), "cluster", "up", "--dir", filepath.Join(t.TempDir(), "c"), "--nodes", "3", "--log-level", "warn")
	up.Stderr = os.Stderr
	out, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		up.Process.Kill()
		up.Wait()
	}()
	rd := bufio.NewReader(out)
	var endpoint string
	for i := range 4 {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("cluster up line %d: %q %v", i, line, err)
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
	if err := up.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- up.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("cluster up after SIGINT: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cluster up still running 30s after SIGINT")
	}
}

package fuse_test

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestMountMetrics: `fs mount --metrics ADDR` serves the file system's
// Prometheus metrics; a write and fsync through the mount shows up as a
// commit with journal blocks.
func TestMountMetrics(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m := e.mount("--metrics", addr)
	writeSynced(t, filepath.Join(m.dir, "f"), []byte("counted\n"))

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	value := func(re string) float64 {
		t.Helper()
		mm := regexp.MustCompile(`(?m)^` + re + ` (\S+)$`).FindSubmatch(body)
		if mm == nil {
			t.Fatalf("no %s in\n%s", re, body)
		}
		v, err := strconv.ParseFloat(string(mm[1]), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if n := value(`nearstore_offloadfs_commits_total\{result="ok"\}`); n < 1 {
		t.Fatalf("commits after a write and fsync: %v", n)
	}
	if n := value(`nearstore_offloadfs_journal_blocks_total`); n < 1 {
		t.Fatalf("journal blocks after a commit: %v", n)
	}
	value(`process_resident_memory_bytes`)
	m.stop()
}

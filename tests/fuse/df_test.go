package fuse_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMountDfAfterRm: df shows the space an rm frees at once, not at the
// next commit (every 5 s).
func TestMountDfAfterRm(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	local := t.TempDir()
	const size = 32 << 20
	writeRandom(t, filepath.Join(local, "big"), size, 9)
	e.ok("put", filepath.Join(local, "big"), "/big")
	m := e.mount()
	// The mount's first periodic commit is 5 s away: what df shows
	// right after the rm cannot be that commit's doing.
	avail := func() int64 {
		t.Helper()
		out := tool(t, m.dir, "df", "-B1", "--output=avail", ".")
		lines := strings.Fields(out)
		n, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
		if err != nil {
			t.Fatalf("df: %q: %v", out, err)
		}
		return n
	}
	start := time.Now()
	before := avail()
	tool(t, m.dir, "rm", "big")
	after := avail()
	if elapsed := time.Since(start); elapsed > 4*time.Second {
		t.Fatalf("rm and df took %v: a periodic commit may have run, the test proves nothing", elapsed)
	}
	if after-before < size {
		t.Fatalf("df after rm of %d bytes: available %d → %d (+%d)", size, before, after, after-before)
	}
	m.stop()
	e.fsck()
}

package fuse_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeRandom writes n pseudo-random bytes to name.
func writeRandom(t *testing.T, name string, n int, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMountTools mounts the file system with the real binary and works on
// it with the real tools, doing the same to a local copy; the mount, and
// then the Go API after unmounting, must agree with the copy.
func TestMountTools(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	local := t.TempDir()
	for i, f := range []struct {
		name string
		size int
	}{
		{"a/empty", 0},
		{"a/one", 1},
		{"a/b/page", 4096},
		{"mib7", 1<<20 + 7},
		{"big", 16 << 20},
	} {
		writeRandom(t, filepath.Join(local, f.name), f.size, uint64(i))
	}

	m := e.mount()
	mnt := m.dir
	tool(t, local, "cp", "-r", ".", mnt)

	// md5sum and ls -R through the mount print what they print locally.
	files := []string{"a/empty", "a/one", "a/b/page", "mib7", "big"}
	sums := func(dir string) string { return tool(t, dir, "md5sum", files...) }
	if got, want := sums(mnt), sums(local); got != want {
		t.Fatalf("md5sum through the mount:\n%s\nlocally:\n%s", got, want)
	}
	if got, want := tool(t, mnt, "ls", "-R"), tool(t, local, "ls", "-R"); got != want {
		t.Fatalf("ls -R through the mount:\n%s\nlocally:\n%s", got, want)
	}

	// The same changes on both sides: renames within and across
	// directories, of a file and of a directory; mkdir; rm; an append; a
	// truncation; an overwrite in place.
	for _, dir := range []string{mnt, local} {
		tool(t, dir, "mkdir", "-p", "c/d")
		tool(t, dir, "mv", "a/one", "a/one2")
		tool(t, dir, "mv", "a/b/page", "c/page")
		tool(t, dir, "mv", "a/b", "c/d/b")
		tool(t, dir, "mv", "mib7", "c/d/mib7")
		tool(t, dir, "rm", "a/empty")
		tool(t, dir, "sh", "-c", "printf 'appended' >> a/one2")
		tool(t, dir, "truncate", "-s", "5000000", "big")
		tool(t, dir, "dd", "if=c/page", "of=big", "bs=4096", "seek=3", "conv=notrunc", "status=none")
		tool(t, dir, "cp", "big", "c/big-copy")
		tool(t, dir, "rm", "-r", "c/d/b")
	}
	if got, want := tool(t, mnt, "ls", "-lR", "--time-style=+"), tool(t, local, "ls", "-lR", "--time-style=+"); lsNames(got) != lsNames(want) {
		t.Fatalf("ls -lR through the mount:\n%s\nlocally:\n%s", got, want)
	}
	if d := localTree(t, mnt).diff(localTree(t, local)); d != "" {
		t.Fatalf("the mount and the local copy differ:\n%s", d)
	}

	// Unmount with Ctrl-C: everything is committed and the Go API sees
	// exactly the local tree.
	m.stop()
	if d := fsTree(t, e.readOnly()).diff(localTree(t, local)); d != "" {
		t.Fatalf("after unmounting, offloadfs and the local copy differ:\n%s", d)
	}
	e.fsck()
}

// lsNames reduces ls -l output to what the mount can match: type, size
// and name of each entry (not permissions, link counts, owners or block
// totals, which differ between file systems).
func lsNames(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0, f[0] == "total":
		case len(f) >= 6 && len(f[0]) == 10:
			size := f[4]
			if f[0][0] == 'd' {
				size = "-" // directory sizes are the file system's own
			}
			b.WriteString(f[0][:1] + " " + size + " " + f[len(f)-1] + "\n")
		default:
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// TestMountUmountReadOnly: `umount DIR` from outside ends the mount
// process cleanly with its writes committed; a --read-only mount serves
// them and refuses changes.
func TestMountUmountReadOnly(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	m := e.mount()
	want := bytes.Repeat([]byte("nearstore "), 100_000)
	if err := os.WriteFile(filepath.Join(m.dir, "f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(m.dir, 0); err != nil {
		t.Fatal(err)
	}
	m.wait()

	ro := e.mount("--read-only")
	got, err := os.ReadFile(filepath.Join(ro.dir, "f"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read through the read-only mount: %d bytes, %v", len(got), err)
	}
	for _, err := range []error{
		os.WriteFile(filepath.Join(ro.dir, "g"), nil, 0o644),
		os.Mkdir(filepath.Join(ro.dir, "d"), 0o755),
		os.Remove(filepath.Join(ro.dir, "f")),
		os.Rename(filepath.Join(ro.dir, "f"), filepath.Join(ro.dir, "h")),
	} {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("change through a read-only mount: %v, want EROFS", err)
		}
	}
	ro.stop()
	e.fsck()
}

// TestMountBusy: Ctrl-C while a file is open leaves the mount serving;
// a second Ctrl-C detaches it, and the process exits, committed, once the
// file closes.
func TestMountBusy(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	m := e.mount()
	if err := os.WriteFile(filepath.Join(m.dir, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(m.dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := m.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(m.stderr.String(), "cannot unmount yet") {
		if time.Now().After(deadline) {
			t.Fatalf("no word of the busy mount after Ctrl-C\n%s", m.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	buf := make([]byte, 4)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "kept" || !isMounted(m.dir) {
		t.Fatalf("after Ctrl-C on a busy mount: read %q, %v; mounted %v", buf, err, isMounted(m.dir))
	}
	if err := m.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for isMounted(m.dir) {
		if time.Now().After(deadline) {
			t.Fatalf("still mounted after the second Ctrl-C\n%s", m.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Detached, but the open file is still served.
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "kept" {
		t.Fatalf("open file after detaching: %q, %v", buf, err)
	}
	f.Close()
	m.wait()
	if d := fsTree(t, e.readOnly()).diff(tree{"f": md5Hex([]byte("kept"))}); d != "" {
		t.Fatalf("after the detached mount ended:\n%s", d)
	}
	e.fsck()
}

package fuse_test

import (
	"errors"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// oldTree writes a small tree under root/name whose files and
// directories have modification times in the past, the same ones on
// every call, and returns them by path relative to root. Modes are
// the ones the mount shows (0644, 0755), so copying ownership and modes
// is not refused.
func oldTree(t *testing.T, root, name string) map[string]time.Time {
	t.Helper()
	base := time.Date(2003, 4, 5, 6, 7, 8, 0, time.UTC)
	files := []string{"a.txt", "sub/b.bin", "sub/deeper/c"}
	want := map[string]time.Time{}
	for i, f := range files {
		writeRandom(t, filepath.Join(root, name, f), 1000*i+17, uint64(40+i))
		want[name+"/"+f] = base.Add(time.Duration(i) * 24 * time.Hour)
	}
	// Directories last, deepest first: adding entries sets their times.
	for i, d := range []string{"sub/deeper", "sub", ""} {
		want[filepath.Join(name, d)] = base.Add(-time.Duration(i+1) * 365 * 24 * time.Hour)
	}
	for p := range want {
		mode := os.FileMode(0o644)
		if fi, err := os.Stat(filepath.Join(root, p)); err == nil && fi.IsDir() {
			mode = 0o755
		}
		if err := os.Chmod(filepath.Join(root, p), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{name + "/a.txt", name + "/sub/b.bin", name + "/sub/deeper/c", name + "/sub/deeper", name + "/sub", name} {
		if err := os.Chtimes(filepath.Join(root, p), want[p], want[p]); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// checkTimes checks the modification times of paths under root.
func checkTimes(t *testing.T, when, root string, want map[string]time.Time) {
	t.Helper()
	for p, mt := range want {
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			t.Errorf("%s: %v", when, err)
			continue
		}
		if !fi.ModTime().Equal(mt) {
			t.Errorf("%s: %s: mtime %v, want %v", when, p, fi.ModTime().UTC(), mt.UTC())
		}
	}
}

// TestMountModTimes: touch -d, cp -p, tar -x and rsync -a through the
// mount keep the times they set, with no error, and the times survive
// unmounting and mounting again; a second rsync -a finds nothing to do.
func TestMountModTimes(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	local := t.TempDir()
	m := e.mount()
	mnt := m.dir
	want := map[string]time.Time{}

	// touch -d: a new file, an existing one, a directory.
	tool(t, mnt, "mkdir", "dir")
	tool(t, mnt, "sh", "-c", "echo hello > existing")
	tool(t, mnt, "touch", "-d", "2001-02-03 04:05:06.123456789 UTC", "new", "existing", "dir")
	ts := time.Date(2001, 2, 3, 4, 5, 6, 123456789, time.UTC)
	want["new"], want["existing"], want["dir"] = ts, ts, ts
	// touch without -d: now.
	tool(t, mnt, "sh", "-c", "echo x > fresh")
	tool(t, mnt, "touch", "-d", "1990-01-01 UTC", "fresh")
	tool(t, mnt, "touch", "fresh")
	if fi, err := os.Stat(filepath.Join(mnt, "fresh")); err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Errorf("touch: mtime %v, %v; want about now", fi.ModTime(), err)
	}

	// cp -p of one file, and of a tree.
	src := oldTree(t, local, "cp")
	tool(t, mnt, "cp", "-p", filepath.Join(local, "cp/a.txt"), "cp-one")
	want["cp-one"] = src["cp/a.txt"]
	tool(t, mnt, "cp", "-rp", filepath.Join(local, "cp"), ".")
	for p, mt := range src {
		want[p] = mt
	}

	// tar -x of an archive with old times (made by tar -c, so the
	// archive's own format decides what is in it).
	tarSrc := t.TempDir()
	tarTimes := oldTree(t, tarSrc, "tar")
	archive := filepath.Join(local, "old.tar")
	tool(t, tarSrc, "tar", "-cf", archive, "tar")
	tool(t, mnt, "tar", "-xf", archive)
	for p, mt := range tarTimes {
		want[p] = mt
	}

	// rsync -a, if installed; then again, which must find nothing to
	// copy (it compares sizes and times).
	t.Run("rsync", func(t *testing.T) {
		if _, err := exec.LookPath("rsync"); err != nil {
			t.Skip("rsync is not installed (apt-get install rsync): rsync -a not tested")
		}
		rsSrc := t.TempDir()
		rsTimes := oldTree(t, rsSrc, "rs")
		tool(t, mnt, "rsync", "-a", filepath.Join(rsSrc, "rs"), ".")
		for p, mt := range rsTimes {
			want[p] = mt
		}
		if out := tool(t, mnt, "rsync", "-ai", filepath.Join(rsSrc, "rs"), "."); out != "" {
			t.Errorf("a second rsync -a copies again:\n%s", out)
		}
	})

	checkTimes(t, "through the mount", mnt, want)
	if d := localTree(t, filepath.Join(mnt, "cp")).diff(localTree(t, filepath.Join(local, "cp"))); d != "" {
		t.Errorf("cp -rp: the copy differs:\n%s", d)
	}

	// Unmounted (committed) and mounted again by a new process.
	m.stop()
	m2 := e.mount()
	checkTimes(t, "after mounting again", m2.dir, want)
	m2.stop()
	fsys := e.readOnly()
	for p, mt := range want {
		if fi, err := fsys.Stat(p); err != nil || !fi.ModTime().Equal(mt) {
			t.Errorf("offloadfs: %s: %v, %v; want mtime %v", p, fi, err, mt)
		}
	}
	e.fsck()
}

// TestMountRefusesUnstored: chmod and chown to anything but what the
// mount shows fail with EPERM (the tools say "Operation not permitted")
// and change nothing; to what it shows, they succeed.
func TestMountRefusesUnstored(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	m := e.mount()
	f := filepath.Join(m.dir, "f")
	d := filepath.Join(m.dir, "d")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		err  error
		what string
	}{
		{os.Chmod(f, 0o600), "chmod 0600 file"},
		{os.Chmod(f, 0o755), "chmod 0755 file"},
		{os.Chmod(d, 0o700), "chmod 0700 dir"},
		{os.Chown(f, os.Getuid()+1, -1), "chown file"},
		{os.Chown(d, -1, os.Getgid()+1), "chgrp dir"},
	} {
		if !errors.Is(c.err, syscall.EPERM) {
			t.Errorf("%s: %v, want EPERM", c.what, c.err)
		}
	}
	out, err := exec.Command("chmod", "0600", f).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Operation not permitted") {
		t.Errorf("the chmod command: %v, %q; want a failure, operation not permitted", err, out)
	}
	for _, c := range []struct {
		err  error
		what string
	}{
		{os.Chmod(f, 0o644), "chmod 0644 file"},
		{os.Chmod(d, 0o755), "chmod 0755 dir"},
		{os.Chown(f, os.Getuid(), os.Getgid()), "chown file to its owner"},
	} {
		if c.err != nil {
			t.Errorf("%s: %v, want success", c.what, c.err)
		}
	}
	// Made private by its writer before it writes, as rsync does with
	// its temporary files: accepted, and not kept. Once written, or
	// closed, it is refused again.
	w, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Chmod(0o600); err != nil {
		t.Errorf("chmod 0600 of a file open for writing, before writing: %v, want success", err)
	}
	if err := w.Chmod(0o755); !errors.Is(err, syscall.EPERM) {
		t.Errorf("chmod 0755 of a file open for writing: %v, want EPERM", err)
	}
	if _, err := w.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if err := w.Chmod(0o600); !errors.Is(err, syscall.EPERM) {
		t.Errorf("chmod 0600 of a file open for writing, after writing: %v, want EPERM", err)
	}
	w2, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w2.Close()
	if err := os.Chmod(f, 0o600); !errors.Is(err, syscall.EPERM) {
		t.Errorf("chmod 0600 right after a close: %v, want EPERM", err)
	}
	w.Close()
	// cp -p of an executable: the mode cannot be kept, and cp says so.
	exe := filepath.Join(t.TempDir(), "exe")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(exe, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command("cp", "-p", exe, m.dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Operation not permitted") {
		t.Errorf("cp -p of a 0755 file: %v, %q; want a failure, operation not permitted", err, out)
	}
	for p, mode := range map[string]iofs.FileMode{f: 0o644, d: iofs.ModeDir | 0o755} {
		if fi, err := os.Stat(p); err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v, %v; want mode %v", p, fi.Mode(), err, mode)
		}
	}
	m.stop()
}

package fuse_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs/fusefs"
)

// TestDeadMountPoint: after the serving process is killed, the mount
// point fails with ENOTCONN ("Transport endpoint is not connected");
// fusefs.CheckMountPoint, `nearstore fs mount` and fusefs.Mount say it is
// a dead FUSE mount and how to clear it, and following that advice works.
func TestDeadMountPoint(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	m := e.mount()
	if err := m.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-m.exited
	if _, err := os.Stat(m.dir); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("stat of the mount point after its server was killed: %v, want ENOTCONN", err)
	}
	err := fusefs.CheckMountPoint(m.dir)
	for _, want := range []string{
		m.dir + " is a dead FUSE mount (the process serving it ended)",
		"run `fusermount3 -u " + m.dir + "` (or `umount " + m.dir + "` as root) and mount again",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("CheckMountPoint of a dead mount: %v; want it to say %q", err, want)
		}
	}
	if !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("CheckMountPoint's error does not wrap ENOTCONN: %v", err)
	}
	// `nearstore fs mount` on it says the same, and fails before taking
	// the file system over.
	_, errOut, code := e.run(nil, "mount", m.dir)
	if code != 1 || !strings.Contains(errOut, m.dir+" is a dead FUSE mount") || !strings.Contains(errOut, "fusermount3 -u "+m.dir) {
		t.Errorf("nearstore fs mount on a dead mount: exit %d, stderr %q", code, errOut)
	}
	// fusefs.Mount checks the same way.
	fsys := testfs.New(t, "mem:8MiB")
	if srv, err := fusefs.Mount(m.dir, fsys, fusefs.Options{Logger: slog.New(slog.DiscardHandler)}); err == nil {
		srv.Unmount()
		t.Fatal("fusefs.Mount on a dead mount succeeded")
	} else if !errors.Is(err, syscall.ENOTCONN) || !strings.Contains(err.Error(), "is a dead FUSE mount") {
		t.Errorf("fusefs.Mount on a dead mount: %v", err)
	}

	// The advice works: unmount, and the directory is usable again.
	var umount *exec.Cmd
	if os.Geteuid() == 0 {
		umount = exec.Command("umount", m.dir)
	} else {
		umount = exec.Command("fusermount3", "-u", m.dir)
	}
	if out, err := umount.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", umount, err, bytes.TrimSpace(out))
	}
	if err := fusefs.CheckMountPoint(m.dir); err != nil {
		t.Fatalf("after unmounting: %v", err)
	}
}

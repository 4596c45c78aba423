package fuse_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/offloadfs"
)

// TestTakeOverOfLiveMount: `fs put --take-over` against a live `fs mount`
// of another host. The preempted mount is fenced for good: its writes
// fail with EROFS (the target refuses them, during the take-over and
// after the taker has released the namespace), it says so, and its
// unmount reports that its changes were not committed. The new owner's
// file survives intact, the fenced mount's later files never appear, and
// fsck is clean.
func TestTakeOverOfLiveMount(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	// Two hosts: the mount's, and the one that takes over. (Processes of
	// one host are one host to the target; see TestSameHost.)
	hostA := []string{"--hostnqn", "nqn.2014-08.org.example:host-a"}
	hostB := []string{"--hostnqn", "nqn.2014-08.org.example:host-b"}
	m := e.mount(hostA...)
	before := []byte("written by the first owner\n")
	writeSynced(t, filepath.Join(m.dir, "before.txt"), before)

	// The mount owns the file system: a plain put is refused.
	local := t.TempDir()
	want := bytes.Repeat([]byte("taken over\n"), 10000)
	src := filepath.Join(local, "r.md")
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	e.fails("another host owns the file system", append([]string{"put", src, "/r.md"}, hostB...)...)
	e.ok(append([]string{"put", src, "/r.md", "--take-over"}, hostB...)...)

	// The put has exited (and left the namespace parked). The old mount
	// carries on as if nothing happened, and must not get through.
	err := writeSyncedErr(filepath.Join(m.dir, "live.txt"), []byte("x\n"))
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing through the preempted mount: %v, want EROFS", err)
	}
	if err := os.WriteFile(filepath.Join(m.dir, "before.txt"), []byte("overwrite"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("overwriting through the preempted mount: %v, want EROFS", err)
	}
	// Reads still work: the old owner can copy its data out.
	if got, err := os.ReadFile(filepath.Join(m.dir, "before.txt")); err != nil || !bytes.Equal(got, before) {
		t.Fatalf("reading through the preempted mount: %q, %v", got, err)
	}

	// Unmounting reports the fence and fails.
	if err := m.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the fenced mount did not exit\n%s", m.stderr)
	}
	if m.err == nil || !strings.Contains(m.stderr.String(), "fenced") {
		t.Fatalf("the fenced mount exited with %v; want a failure that says it was fenced\n%s", m.err, m.stderr)
	}

	// The new owner's file is intact, the fenced mount's is absent.
	e.fsck()
	fsys := e.readOnly()
	if got := readAll(t, fsys, "/r.md"); !bytes.Equal(got, want) {
		t.Fatalf("/r.md after the fenced mount went: %d bytes, want %d", len(got), len(want))
	}
	if got := readAll(t, fsys, "/before.txt"); !bytes.Equal(got, before) {
		t.Fatalf("/before.txt: %q", got)
	}
	if _, err := fsys.Stat("/live.txt"); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("/live.txt, written by the fenced mount: %v, want it absent", err)
	}
	// And the namespace is usable without a take-over.
	e.ok("put", src, "/again.md")
}

// TestInterruptedPut: a put whose source is a pipe, interrupted with
// SIGINT while its writer then dies, leaves REMOTE as it was, leaves no
// temporary file behind, and exits 130. A put that is not interrupted
// replaces REMOTE (the control).
func TestInterruptedPut(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	dir := t.TempDir()
	old := []byte("the file as it was\n")
	e.okIn(old, "put", "-", "/big")

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, append([]string{"fs", "put", fifo, "/big"}, e.target()...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // blocks until put opens it
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bytes.Repeat([]byte{0xab}, 3<<20)); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// The writer dies after the signal, as a writer in the same
	// pipeline does: put sees the end of its input either way.
	time.Sleep(200 * time.Millisecond)
	w.Close()
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("interrupted put: %v, want exit 130\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupt") {
		t.Fatalf("interrupted put says %q; want it to say it was interrupted", stderr.String())
	}
	fsys := e.readOnly()
	if got := readAll(t, fsys, "/big"); !bytes.Equal(got, old) {
		t.Fatalf("/big after an interrupted put: %d bytes, want the old %d", len(got), len(old))
	}
	ents, err := fsys.ReadDir("/")
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		if de.Name() != "big" {
			t.Fatalf("an interrupted put left %q behind", de.Name())
		}
	}

	// The control: the same put, not interrupted, replaces it.
	data := bytes.Repeat([]byte{0xcd}, 3<<20)
	e.okIn(data, "put", "-", "/big")
	if got := readAll(t, e.readOnly(), "/big"); !bytes.Equal(got, data) {
		t.Fatalf("/big after a complete put: %d bytes, want %d", len(got), len(data))
	}
}

// writeSynced writes a file through a mount and fsyncs it.
func writeSynced(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := writeSyncedErr(name, b); err != nil {
		t.Fatal(err)
	}
}

func writeSyncedErr(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readAll reads a whole file through the Go API.
func readAll(t *testing.T, fsys *offloadfs.FS, name string) []byte {
	t.Helper()
	f, err := fsys.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDestructiveIORefusesFS: block-level commands that overwrite a
// namespace refuse one that holds an offloadfs unless --force, and refuse
// a size beyond the namespace, both before writing anything; with
// --force they free the file system's parked reservation and overwrite.
func TestDestructiveIORefusesFS(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	e.okIn([]byte("keep me\n"), "put", "-", "/keep")
	io := func(wantCode int, want string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, e.bin, append(append([]string{"io"}, args...), e.target()...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != wantCode || !strings.Contains(string(out), want) {
			t.Fatalf("nearstore io %s: exit %d, %q; want exit %d and %q", strings.Join(args, " "), code, out, wantCode, want)
		}
	}
	io(1, "holds an offloadfs", "verify", "--size", "1MiB")
	io(1, "more than namespace", "verify", "--size", "1GiB", "--force")
	io(1, "holds an offloadfs", "bench", "--rw", "randwrite", "--duration", "1s", "--quiet")
	// Nothing was written: the file system and its file are intact.
	e.fsck()
	if got := readAll(t, e.readOnly(), "/keep"); string(got) != "keep me\n" {
		t.Fatalf("/keep after refused overwrites: %q", got)
	}
	io(0, "checks passed", "verify", "--size", "1MiB", "--force")
	if _, err := offloadfs.MountReadOnly(context.Background(), e.ns, offloadfs.Options{}); err == nil {
		t.Fatal("the file system still mounts after io verify --force overwrote it")
	}
}

// TestSameHost: every run of the CLI on a machine is the same host to the
// target (its NQN from /etc/nvme/hostnqn or the machine ID), so a put
// killed outright leaves nothing that stops the next one, without
// --take-over; and a second read-write mount while one is live is refused
// on this machine, since the target could not keep two mounts of one host
// apart.
func TestSameHost(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	old := []byte("before the killed put\n")
	e.okIn(old, "put", "-", "/f")

	// A put killed with SIGKILL while it holds the file system.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e.bin, append([]string{"fs", "put", fifo, "/f"}, e.target()...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bytes.Repeat([]byte{1}, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	w.Close()

	// The next put from this host reclaims the file system by itself.
	want := []byte("after\n")
	e.okIn(want, "put", "-", "/f")
	if got := readAll(t, e.readOnly(), "/f"); !bytes.Equal(got, want) {
		t.Fatalf("/f: %q, want %q", got, want)
	}

	// A live mount of this host: a second read-write user of the same
	// host is refused, even with --take-over; a read-only one is not.
	m := e.mount()
	e.fails("this host already has", "put", "-", "/g")
	e.fails("this host already has", "put", "-", "/g", "--take-over")
	e.ok("ls", "/")
	m.stop()
	e.fsck()
}

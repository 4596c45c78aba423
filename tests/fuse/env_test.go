// Package fuse_test holds nearstore's end-to-end tests of offloadfs through
// the real binary: a real target on a loopback TCP listener, the file
// system made with the Go API, then `nearstore fs mount` run as its own
// process and driven by the ordinary tools (cp, md5sum, ls, mv, rm, mkdir,
// truncate), and the `nearstore fs` commands run one by one. Whatever went
// through the binary is then read back through the Go API and compared.
//
// The FUSE tests skip when FUSE cannot be used: no /dev/fuse, or mounting
// not permitted (not root and no fusermount3).
package fuse_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/syncbuf"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/offloadfs/fusefs"
	"github.com/nearstore/nearstore/volume"
)

const (
	testNQN = "nqn.2026-11.io.nearstore:fuse-e2e"
	nsSize  = 128 << 20
)

func TestMain(m *testing.M) { clitest.Main(m) }

// fuseProbe mounts a scratch file system in this process to learn whether
// FUSE works here at all.
var fuseProbe = sync.OnceValue(func() error {
	v, err := volume.Open("mem:8MiB")
	if err != nil {
		return err
	}
	defer v.Close()
	dev := offloadfs.VolumeDevice(v)
	ctx := context.Background()
	if err := offloadfs.Mkfs(ctx, dev, offloadfs.MkfsOptions{}); err != nil {
		return err
	}
	fsys, err := offloadfs.Mount(ctx, dev, offloadfs.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer fsys.Close()
	dir, err := os.MkdirTemp("", "nearstore-fuse-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	srv, err := fusefs.Mount(dir, fsys, fusefs.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := srv.Unmount(); err != nil {
		srv.Detach()
		return err
	}
	return nil
})

// requireFUSE skips the test if FUSE cannot be mounted here.
func requireFUSE(t *testing.T) {
	t.Helper()
	if err := fuseProbe(); errors.Is(err, fusefs.ErrUnavailable) {
		t.Skipf("FUSE is not available (needs /dev/fuse, and root or fusermount3 from package fuse3): %v", err)
	} else if err != nil {
		t.Fatalf("FUSE probe: %v", err)
	}
}

// env is a running target with one memory namespace, and a host connected
// to it.
type env struct {
	t    *testing.T
	addr string
	ns   *host.Namespace
	bin  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	bin := clitest.Binary(t)
	v, err := volume.Open(fmt.Sprintf("mem:%d", nsSize))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	srv := testtarget.Start(t, testtarget.Config{NQN: testNQN, Name: "fuse-e2e", Volume: v})
	t.Cleanup(srv.Stop)
	_, ns := testhost.Connect(t, srv.Addr(), testNQN, 1, host.Options{KeepAlive: -1})
	return &env{t: t, addr: srv.Addr(), ns: ns, bin: bin}
}

func (e *env) mkfs() {
	e.t.Helper()
	if err := offloadfs.Mkfs(context.Background(), e.ns, offloadfs.MkfsOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// target is the flags that name the test's namespace.
func (e *env) target() []string { return []string{"--addr", e.addr, "--nqn", testNQN} }

// run runs `nearstore fs args...` with stdin and returns stdout, stderr and
// the exit code; the test fails if it runs for more than 30 seconds.
func (e *env) run(stdin []byte, args ...string) (string, string, int) {
	e.t.Helper()
	r := clitest.Run(e.t, 30*time.Second, bytes.NewReader(stdin), nil, append(append([]string{"fs"}, args...), e.target()...)...)
	return r.Stdout, r.Stderr, r.Code
}

// ok runs a command that must succeed and returns its stdout.
func (e *env) ok(args ...string) string { return e.okIn(nil, args...) }

func (e *env) okIn(stdin []byte, args ...string) string {
	e.t.Helper()
	out, errOut, code := e.run(stdin, args...)
	if code != 0 {
		e.t.Fatalf("nearstore fs %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// fails runs a command that must exit 1 with an error containing want,
// and returns its stdout.
func (e *env) fails(want string, args ...string) string {
	e.t.Helper()
	return e.failsWith(1, want, args...)
}

// failsWith runs a command that must exit with code and an error
// containing want, and returns its stdout.
func (e *env) failsWith(code int, want string, args ...string) string {
	e.t.Helper()
	out, errOut, got := e.run(nil, args...)
	if got != code || !strings.Contains(errOut, want) {
		e.t.Fatalf("nearstore fs %s: exit %d, stderr %q; want exit %d and %q", strings.Join(args, " "), got, errOut, code, want)
	}
	return out
}

// readOnly mounts the namespace's file system read-only through the Go API
// for the rest of the test.
func (e *env) readOnly() *offloadfs.FS {
	e.t.Helper()
	fsys, err := offloadfs.MountReadOnly(context.Background(), e.ns, offloadfs.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { fsys.Close() })
	return fsys
}

// fsck checks the file system through the Go API.
func (e *env) fsck() {
	e.t.Helper()
	testfs.Fsck(e.t, e.readOnly())
}

// mounted is a `nearstore fs mount` process.
type mounted struct {
	t      *testing.T
	dir    string
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer // the process's stderr copier writes, the test reads
	exited chan struct{}
	err    error // the process's exit, once exited is closed
}

// mount starts `nearstore fs mount` on a new directory and waits until
// the kernel shows the mount. Whatever happens, the test leaves neither
// the mount nor the process behind.
func (e *env) mount(extra ...string) *mounted {
	e.t.Helper()
	requireFUSE(e.t)
	dir := e.t.TempDir()
	args := append(append([]string{"fs", "mount", dir}, e.target()...), extra...)
	m := &mounted{t: e.t, dir: dir, cmd: exec.Command(e.bin, args...), stderr: &syncbuf.Buffer{}, exited: make(chan struct{})}
	m.cmd.Stderr = m.stderr
	if err := m.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		m.err = m.cmd.Wait()
		close(m.exited)
	}()
	// Registered after TempDir's cleanup, so it runs first: the
	// directory is unmounted before it is removed.
	e.t.Cleanup(m.cleanup)
	deadline := time.Now().Add(20 * time.Second)
	for !isMounted(dir) {
		select {
		case <-m.exited:
			e.t.Fatalf("nearstore fs mount exited before mounting: %v\n%s", m.err, m.stderr)
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("nearstore fs mount: not mounted after 20 s\n%s", m.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return m
}

// cleanup unmounts (lazily if it must) and ends the process.
func (m *mounted) cleanup() {
	if isMounted(m.dir) {
		if err := syscall.Unmount(m.dir, 0); err != nil {
			m.t.Logf("unmount %s: %v; detaching", m.dir, err)
			syscall.Unmount(m.dir, syscall.MNT_DETACH)
		}
	}
	select {
	case <-m.exited:
		return
	case <-time.After(10 * time.Second):
	}
	m.t.Errorf("nearstore fs mount still running 10 s after unmount; killing it\n%s", m.stderr)
	m.cmd.Process.Kill()
	<-m.exited
	if isMounted(m.dir) {
		syscall.Unmount(m.dir, syscall.MNT_DETACH)
	}
}

// stop interrupts the process (as Ctrl-C does) and checks that it
// unmounted and exited cleanly.
func (m *mounted) stop() {
	m.t.Helper()
	if err := m.cmd.Process.Signal(os.Interrupt); err != nil {
		m.t.Fatal(err)
	}
	m.wait()
}

// wait waits for the process to exit by itself and checks it succeeded.
func (m *mounted) wait() {
	m.t.Helper()
	select {
	case <-m.exited:
	case <-time.After(20 * time.Second):
		m.t.Fatalf("nearstore fs mount did not exit\n%s", m.stderr)
	}
	if m.err != nil {
		m.t.Fatalf("nearstore fs mount: %v\n%s", m.err, m.stderr)
	}
	if isMounted(m.dir) {
		m.t.Fatalf("%s is still mounted after the process exited", m.dir)
	}
}

// isMounted reports whether dir is a mount point, from mountinfo.
func isMounted(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// Field 5 is the mount point, with spaces and the like octal-escaped.
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && unescapeMount(fields[4]) == dir {
			return true
		}
	}
	return false
}

func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// tool runs an ordinary command in dir and returns its stdout; it must
// succeed.
func tool(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	// The C locale: ls sorts by bytes on both sides.
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var o, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, se.String())
	}
	return o.String()
}

// tree is a file tree's listing: every path (directories end in /) and,
// for files, the MD5 of the contents.
type tree map[string]string

// localTree reads a directory tree of the local file system (or a mount).
func localTree(t *testing.T, root string) tree {
	t.Helper()
	out := tree{}
	err := filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			out[filepath.ToSlash(rel)+"/"] = ""
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := md5.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fsTree reads a tree through the Go API.
func fsTree(t *testing.T, fsys *offloadfs.FS) tree {
	t.Helper()
	out := tree{}
	var walk func(dir string)
	walk = func(dir string) {
		ents, err := fsys.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			p := path.Join(dir, e.Name())
			rel := strings.TrimPrefix(p, "/")
			if e.IsDir() {
				out[rel+"/"] = ""
				walk(p)
				continue
			}
			f, err := fsys.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			h := md5.New()
			if _, err := io.Copy(h, f); err != nil {
				t.Fatal(err)
			}
			f.Close()
			out[rel] = hex.EncodeToString(h.Sum(nil))
		}
	}
	walk("/")
	return out
}

func md5Hex(b []byte) string {
	h := md5.Sum(b)
	return hex.EncodeToString(h[:])
}

// diff describes how two trees differ, or returns "".
func (a tree) diff(b tree) string {
	var s strings.Builder
	for p, h := range a {
		if hb, ok := b[p]; !ok {
			fmt.Fprintf(&s, "  only in the first: %s\n", p)
		} else if hb != h {
			fmt.Fprintf(&s, "  differs: %s\n", p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			fmt.Fprintf(&s, "  only in the second: %s\n", p)
		}
	}
	return s.String()
}

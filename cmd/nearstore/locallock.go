package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/nearstore/nearstore/host"
)

// Read-write mounts from one machine. Every CLI run on a machine is the
// same host to a target (conn.identity), and a target tells hosts apart,
// not processes: a second read-write mount from this machine would take
// the namespace's reservation from the first without the target fencing
// anything, and both would write. So the processes of one machine agree
// among themselves first, with a lock file per namespace: a read-write
// mount holds an exclusive flock on it until it exits, and the kernel
// drops the lock of a process that dies, so a crashed mount's host takes
// the file system back by itself.

// lockDir is where the lock files live: /run/nearstore for root, else the
// user's runtime directory, else the temporary directory.
func lockDir() string {
	if os.Geteuid() == 0 {
		return "/run/nearstore"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "nearstore")
	}
	return filepath.Join(os.TempDir(), "nearstore-"+strconv.Itoa(os.Getuid()))
}

// lockLocalOwner takes this machine's lock on ns for a read-write mount,
// or says which process holds it. The namespace is named by its
// subsystem and NGUID/UUID, which every address of the target shares, and
// the host by its NQN: processes that present different host NQNs are
// different hosts to the target, which keeps them apart itself.
func lockLocalOwner(c *conn, ns *host.Namespace) (unlock func(), err error) {
	dir := lockDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lock directory: %w", err)
	}
	nguid, uuid := ns.NGUID(), ns.UUID()
	if c.host == "" {
		// A random identity: this run is a host of its own.
		return func() {}, nil
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%x\x00%x", c.host, c.nqn, ns.ID(), nguid, uuid))
	path := filepath.Join(dir, "fs-"+hex.EncodeToString(sum[:8])+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("this host already has namespace %d of %s mounted read-write (%s); "+
				"a second read-write mount from the same host would share its NVMe identity, so the target could not keep them apart: "+
				"stop that one first, or use --read-only", ns.ID(), c.nqn, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock file %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(fmt.Appendf(nil, "pid %d: %s\n", os.Getpid(), strings.Join(os.Args, " ")), 0)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// Package testfs gives tests an offloadfs for the length of the test:
// formatted on a device (a memory volume in this process, or a namespace
// of a real target), mounted, unmounted when the test ends, and checked
// with a fsck that must come back clean.
package testfs

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"

	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

// Quiet are mount options for tests: no periodic commits, so commits
// happen exactly where the test asks, and no log.
func Quiet() offloadfs.Options {
	return offloadfs.Options{CommitInterval: -1, Logger: slog.New(slog.DiscardHandler)}
}

// Device opens the volume spec (volume.Open's syntax) as a device,
// closed when t ends.
func Device(t testing.TB, spec string) offloadfs.Device {
	t.Helper()
	v, err := volume.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return offloadfs.VolumeDevice(v)
}

// Format makes an empty file system on dev with default mkfs options.
func Format(t testing.TB, dev offloadfs.Device) {
	t.Helper()
	FormatWith(t, dev, offloadfs.MkfsOptions{})
}

// FormatWith makes an empty file system on dev with mkfs's options.
func FormatWith(t testing.TB, dev offloadfs.Device, mkfs offloadfs.MkfsOptions) {
	t.Helper()
	if err := offloadfs.Mkfs(context.Background(), dev, mkfs); err != nil {
		t.Fatal(err)
	}
}

// Mount mounts dev read-write with opts (a nil Logger discards) and
// unmounts it when t ends. The test may unmount it itself first; an
// unmount at the end that fails for another reason fails t, since it
// means the file system's last commit was lost.
func Mount(t testing.TB, dev offloadfs.Device, opts offloadfs.Options) *offloadfs.FS {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	fsys, err := offloadfs.Mount(context.Background(), dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fsys.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			t.Errorf("unmount: %v", err)
		}
	})
	return fsys
}

// Fresh formats dev and mounts it with Quiet options, for the length
// of t.
func Fresh(t testing.TB, dev offloadfs.Device) *offloadfs.FS {
	t.Helper()
	return FreshWith(t, dev, offloadfs.MkfsOptions{})
}

// FreshWith is Fresh with mkfs's options.
func FreshWith(t testing.TB, dev offloadfs.Device, mkfs offloadfs.MkfsOptions) *offloadfs.FS {
	t.Helper()
	FormatWith(t, dev, mkfs)
	return Mount(t, dev, Quiet())
}

// New is Fresh on a new volume spec (Device).
func New(t testing.TB, spec string) *offloadfs.FS {
	t.Helper()
	return Fresh(t, Device(t, spec))
}

// Create creates (or truncates) the file name in fsys, read-write, and
// closes it when t ends, before the file system is unmounted (Mount's
// cleanup was registered first). Closing it earlier is fine.
func Create(t testing.TB, fsys *offloadfs.FS, name string) *offloadfs.File {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Fsck checks fsys and fails t unless it is consistent; it returns the
// report for tests that look further (orphans, counts).
func Fsck(t testing.TB, fsys *offloadfs.FS) *offloadfs.Report {
	t.Helper()
	rep, err := fsys.Fsck(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatalf("fsck: %v", err)
	}
	return rep
}

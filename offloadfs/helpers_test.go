package offloadfs_test

import (
	"context"
	"hash/crc32"
	"log/slog"
	"testing"

	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

// quiet are mount options for tests: no periodic commits, so commits
// happen exactly where the test asks.
func quiet() offloadfs.Options {
	return offloadfs.Options{CommitInterval: -1, Logger: slog.New(slog.DiscardHandler)}
}

// newDev opens a volume as a device, closed with the test.
func newDev(t testing.TB, spec string) offloadfs.Device {
	t.Helper()
	v, err := volume.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return offloadfs.VolumeDevice(v)
}

// newFS formats and mounts a fresh file system, unmounted with the test.
func newFS(t testing.TB, spec string) *offloadfs.FS {
	t.Helper()
	return mkfsMount(t, newDev(t, spec))
}

// mkfsMount formats dev and mounts it, unmounted with the test.
func mkfsMount(t testing.TB, dev offloadfs.Device) *offloadfs.FS {
	t.Helper()
	if err := offloadfs.Mkfs(context.Background(), dev, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	fsys, err := offloadfs.Mount(context.Background(), dev, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	return fsys
}

// crc32c is the checksum offloadfs uses, for tests that forge metadata.
func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

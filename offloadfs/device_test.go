package offloadfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

// Both kinds of device the file system runs on fit the interface: remote
// namespaces as they are, local volumes through VolumeDevice.
var (
	_ offloadfs.Device = (*host.Namespace)(nil)
	_ offloadfs.Zeroer = (*host.Namespace)(nil)
	_ offloadfs.Volume = volume.Volume(nil)
)

// strictZeroer is a device whose WriteZeroes, like an NVMe namespace's,
// takes only whole device blocks.
type strictZeroer struct {
	offloadfs.Device
	calls int
}

func (d *strictZeroer) WriteZeroes(_ context.Context, off, n int64) error {
	bs := int64(d.BlockSize())
	if n <= 0 || off%bs != 0 || n%bs != 0 {
		return fmt.Errorf("write zeroes [%d, +%d) is not aligned to %d-byte blocks", off, n, bs)
	}
	d.calls++
	return writeZeros(d.Device, off, n)
}

func writeZeros(d offloadfs.Device, off, n int64) error {
	_, err := d.WriteAt(make([]byte, n), off)
	return err
}

// A file grows to any byte size, on a device that zeroes only whole
// blocks: the ragged ends are written, the middle zeroed by the device.
func TestGrowOnBlockZeroer(t *testing.T) {
	dev := &strictZeroer{Device: testfs.Device(t, "mem:64MiB")}
	fsys := testfs.Fresh(t, dev)
	f := testfs.Create(t, fsys, "/f")
	want := bytes.Repeat([]byte{0xAB}, 1000)
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{1003, 5000, 1<<20 + 3} {
		if err := f.Truncate(size); err != nil {
			t.Fatalf("Truncate(%d): %v", size, err)
		}
		want = append(want, make([]byte, size-int64(len(want)))...)
	}
	tail := []byte("tail")
	if _, err := f.WriteAt(tail, 2<<20+1); err != nil {
		t.Fatalf("WriteAt past the end: %v", err)
	}
	want = append(want, make([]byte, 2<<20+1-len(want))...)
	want = append(want, tail...)
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("file contents differ after growing")
	}
	if dev.calls == 0 {
		t.Error("the device's WriteZeroes was never used for the aligned middle")
	}
}

// A cancelled Sync is refused before it starts and leaves the file system
// usable: a commit is never abandoned halfway.
func TestSyncCancelled(t *testing.T) {
	fsys := testfs.New(t, "mem:64MiB")
	testfs.Create(t, fsys, "/a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := fsys.Sync(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := fsys.Create("/b"); err != nil {
		t.Fatalf("Create after a cancelled Sync: %v", err)
	}
	if err := fsys.Sync(context.Background()); err != nil {
		t.Fatalf("Sync after a cancelled one: %v", err)
	}
}

package offloadfs_test

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
)

// readLog is a device that records the reads it is given.
type readLog struct {
	offloadfs.Device
	mu    sync.Mutex
	reads [][2]int64 // offset, length
}

func (d *readLog) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	d.reads = append(d.reads, [2]int64{off, int64(len(p))})
	d.mu.Unlock()
	return d.Device.ReadAt(p, off)
}

func (d *readLog) take() [][2]int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.reads
	d.reads = nil
	return r
}

// TestUnalignedReadIsOneWholeBlockRead: a small read that starts and ends
// inside blocks (a table's block with its checksum trailer) reaches the
// device as one read of whole blocks, and returns the file's bytes; a read
// larger than the bound goes as it is.
func TestUnalignedReadIsOneWholeBlockRead(t *testing.T) {
	dev := &readLog{Device: testfs.Device(t, "mem:64MiB?bs=4096")}
	fsys := testfs.Fresh(t, dev)
	f := testfs.Create(t, fsys, "table")
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	bs := int64(dev.BlockSize())
	for _, c := range []struct {
		off, n int64
		whole  bool // widened to whole blocks
	}{
		{off: 4100, n: 4100, whole: true},  // a 4 KiB block and its trailer
		{off: 7, n: 1, whole: true},        // inside one block
		{off: 8192, n: 4096, whole: false}, // aligned already
		{off: 100, n: 128 << 10, whole: false},
	} {
		dev.take()
		got := make([]byte, c.n)
		if _, err := f.ReadAt(got, c.off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data[c.off:c.off+c.n]) {
			t.Fatalf("read [%d, +%d): wrong bytes", c.off, c.n)
		}
		reads := dev.take()
		if !c.whole {
			if len(reads) != 1 || reads[0][1] != c.n {
				t.Errorf("read [%d, +%d): device reads %v, want it as it is", c.off, c.n, reads)
			}
			continue
		}
		if len(reads) != 1 || reads[0][0]%bs != 0 || reads[0][1]%bs != 0 {
			t.Errorf("read [%d, +%d): device reads %v, want one of whole %d-byte blocks", c.off, c.n, reads, bs)
		}
	}
}

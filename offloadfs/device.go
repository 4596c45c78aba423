package offloadfs

import (
	"context"
	"fmt"
	"io"
)

// Device is the block device a file system lives on: a remote namespace
// (*host.Namespace fits as is) or a local volume (through VolumeDevice).
//
// ReadAt and WriteAt take byte offsets; the file system only ever issues
// them at multiples of its block size for metadata, but file data follows
// the application's offsets and lengths, so a device must accept any
// range inside it. Flush makes every completed write durable; the file
// system's crash consistency rests on it.
type Device interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	// Size is the capacity in bytes.
	Size() int64
	// BlockSize is the logical block size; extent maps are expressed in
	// blocks of this size.
	BlockSize() int
	Flush(ctx context.Context) error
}

// Zeroer is implemented by devices that can zero a range without moving
// the zeroes over the wire (NVMe Write Zeroes, fallocate). The file system
// uses it to clear inode tables and the gaps of sparse writes.
type Zeroer interface {
	WriteZeroes(ctx context.Context, off, n int64) error
}

// Volume is what VolumeDevice needs of a local volume; volume.Volume
// satisfies it.
type Volume interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
	BlockSize() int
	Flush() error
}

// VolumeDevice adapts a volume (volume.Volume) to Device. If the volume
// can zero ranges (WriteZeroes(off, n int64) error), so can the device.
func VolumeDevice(v Volume) Device {
	if z, ok := v.(volumeZeroer); ok {
		return &zeroingVolumeDevice{volumeDevice{v}, z}
	}
	return &volumeDevice{v}
}

type volumeZeroer interface {
	WriteZeroes(off, n int64) error
}

type volumeDevice struct{ Volume }

// Flush ignores ctx: a volume flush is a local fdatasync.
func (d *volumeDevice) Flush(context.Context) error { return d.Volume.Flush() }

type zeroingVolumeDevice struct {
	volumeDevice
	z volumeZeroer
}

func (d *zeroingVolumeDevice) WriteZeroes(_ context.Context, off, n int64) error {
	return d.z.WriteZeroes(off, n)
}

// zeroChunk is the largest buffer writeZeroes allocates when the device
// cannot zero by itself.
const zeroChunk = 1 << 20

// writeZeroes zeroes [off, off+n) of dev.
func writeZeroes(ctx context.Context, dev Device, off, n int64) error {
	if n <= 0 {
		return nil
	}
	if z, ok := dev.(Zeroer); ok {
		// A Zeroer works in whole device blocks (an NVMe namespace's
		// Write Zeroes takes LBAs), but a file grows to any byte size:
		// zero the aligned middle there and the ragged ends by writing.
		bs := int64(dev.BlockSize())
		start := (off + bs - 1) / bs * bs
		end := (off + n) / bs * bs
		if start < end {
			if err := writeZeroBuffers(dev, off, start-off); err != nil {
				return err
			}
			if err := z.WriteZeroes(ctx, start, end-start); err != nil {
				return fmt.Errorf("offloadfs: zero [%d, +%d): %w", start, end-start, err)
			}
			return writeZeroBuffers(dev, end, off+n-end)
		}
	}
	return writeZeroBuffers(dev, off, n)
}

// writeZeroBuffers zeroes [off, off+n) with ordinary writes.
func writeZeroBuffers(dev Device, off, n int64) error {
	if n <= 0 {
		return nil
	}
	buf := make([]byte, min(n, zeroChunk))
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := dev.WriteAt(buf[:k], off); err != nil {
			return fmt.Errorf("offloadfs: zero [%d, +%d): %w", off, k, err)
		}
		off += k
		n -= k
	}
	return nil
}

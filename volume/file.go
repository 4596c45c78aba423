package volume

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Direct I/O bookkeeping. Stripe regions of 64 KiB mean a typical write
// (up to 64 KiB) takes at most two stripe locks; 64 stripes make unrelated
// writes rarely contend.
const (
	stripeShift = 16
	nStripes    = 64
	// bounceSize is the largest piece an unaligned request is split into.
	bounceSize = 256 << 10
	// maxAlign is the largest direct I/O alignment we probe for or accept.
	maxAlign = 4096
)

// fileVolume is a file or block device volume.
type fileVolume struct {
	spec   string
	f      *os.File
	rc     syscall.RawConn // for fallocate, fdatasync and ioctls on f
	size   int64
	bs     int
	direct bool
	// align is the O_DIRECT alignment of offsets, lengths and buffer
	// addresses; 1 when not direct.
	align int64
	// zeroAlign is the alignment of the ranges zero passes to fallocate:
	// the sector size for devices, which refuse anything else, align for
	// direct files, 1 (no constraint) otherwise.
	zeroAlign int64

	closed atomic.Bool
	// noZeroRange and noPunch remember that fallocate refused a mode, so
	// later calls go straight to the fallback.
	noZeroRange atomic.Bool
	noPunch     atomic.Bool

	// stripes serialize read-modify-write against other writes to the same
	// blocks (direct only; see the package documentation).
	stripes [nStripes]sync.RWMutex
	// bounce holds *[]byte buffers of bounceSize, aligned to align.
	bounce sync.Pool
}

// openFile opens "file:PATH[?size=SIZE][&direct=1][&bs=N]".
func openFile(s *spec) (Volume, error) {
	if err := s.allow("size", "direct", "bs"); err != nil {
		return nil, err
	}
	if s.body == "" {
		return nil, s.errorf("missing path (e.g. file:/var/lib/nearstore/vol0.img?size=1GiB)")
	}
	size, haveSize := int64(0), false
	if v, ok := s.params["size"]; ok {
		n, err := s.size("size", v)
		if err != nil {
			return nil, err
		}
		size, haveSize = n, true
	}
	direct, err := s.boolParam("direct", false)
	if err != nil {
		return nil, err
	}
	bs, err := s.blockSize(defaultBlockSize)
	if err != nil {
		return nil, err
	}
	if haveSize && size%int64(bs) != 0 {
		return nil, s.errorf("size %d is not a multiple of the block size %d", size, bs)
	}
	if direct && !directSupported {
		return nil, s.errorf("direct=1 is not supported on this platform")
	}

	flags := os.O_RDWR
	if haveSize {
		flags |= os.O_CREATE
	}
	if direct {
		flags |= oDirect
	}
	f, err := os.OpenFile(s.body, flags, 0o644)
	if err != nil {
		if !haveSize && errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("volume: %s: file does not exist; add ?size= to create it: %w", s.raw, err)
		}
		return nil, fmt.Errorf("volume: %s: %w", s.raw, err)
	}
	v, err := newFileVolume(s, f, size, haveSize, bs, direct)
	if err != nil {
		f.Close()
		return nil, err
	}
	return v, nil
}

// newFileVolume finishes opening a regular file: size, alignment.
func newFileVolume(s *spec, f *os.File, size int64, haveSize bool, bs int, direct bool) (*fileVolume, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("volume: %s: %w", s.raw, err)
	}
	if !st.Mode().IsRegular() {
		return nil, s.errorf("%s is not a regular file (use dev: for block devices)", s.body)
	}
	if haveSize {
		if st.Size() != size {
			if err := f.Truncate(size); err != nil {
				return nil, fmt.Errorf("volume: %s: resize: %w", s.raw, err)
			}
		}
	} else {
		// Like a loop device, ignore a trailing partial block rather than
		// refuse an odd-sized image.
		size = st.Size() - st.Size()%int64(bs)
		if size == 0 {
			return nil, fmt.Errorf("volume: %s: file is smaller than one %d-byte block; add ?size= to set its size", s.raw, bs)
		}
	}
	v, err := newFileVolumeCommon(s, f, size, bs, direct)
	if err != nil {
		return nil, err
	}
	if direct {
		a, err := v.probeAlign()
		if err != nil {
			return nil, fmt.Errorf("volume: %s: %w", s.raw, err)
		}
		if size%a != 0 {
			return nil, s.errorf("size %d is not a multiple of the direct I/O alignment %d", size, a)
		}
		v.align, v.zeroAlign = a, a
	}
	return v, nil
}

// newFileVolumeCommon fills in what files and devices share.
func newFileVolumeCommon(s *spec, f *os.File, size int64, bs int, direct bool) (*fileVolume, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("volume: %s: %w", s.raw, err)
	}
	return &fileVolume{spec: s.raw, f: f, rc: rc, size: size, bs: bs, direct: direct, align: 1, zeroAlign: 1}, nil
}

// probeAlign finds the smallest O_DIRECT alignment the file accepts by
// trying reads at offset 0. Kernels since 6.1 report it through statx
// (STATX_DIOALIGN), but probing works everywhere and needs no extra
// dependency. A read beyond EOF is fine: only EINVAL means misaligned.
func (v *fileVolume) probeAlign() (int64, error) {
	buf := alignedBuf(maxAlign, maxAlign)
	var lastErr error
	for a := 512; a <= maxAlign; a *= 2 {
		_, err := v.f.ReadAt(buf[:a], 0)
		if err == nil || errors.Is(err, io.EOF) {
			return int64(a), nil
		}
		if !isEINVAL(err) {
			return 0, err
		}
		lastErr = err
	}
	return 0, fmt.Errorf("no O_DIRECT alignment up to %d works: %w", maxAlign, lastErr)
}

// openDev opens "dev:/dev/PATH[?bs=N][&direct=0]".
func openDev(s *spec) (Volume, error) {
	if err := s.allow("bs", "direct"); err != nil {
		return nil, err
	}
	if s.body == "" {
		return nil, s.errorf("missing device path (e.g. dev:/dev/nvme0n1)")
	}
	direct, err := s.boolParam("direct", true)
	if err != nil {
		return nil, err
	}
	if direct && !directSupported {
		return nil, s.errorf("direct I/O is not supported on this platform; add ?direct=0")
	}
	flags := os.O_RDWR
	if direct {
		flags |= oDirect
	}
	f, err := os.OpenFile(s.body, flags, 0)
	if err != nil {
		return nil, fmt.Errorf("volume: %s: %w", s.raw, err)
	}
	v, err := newDevVolume(s, f, direct)
	if err != nil {
		f.Close()
		return nil, err
	}
	return v, nil
}

// newDevVolume finishes opening a block device.
func newDevVolume(s *spec, f *os.File, direct bool) (*fileVolume, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("volume: %s: %w", s.raw, err)
	}
	if st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
		return nil, s.errorf("%s is not a block device (use file: for files)", s.body)
	}
	v, err := newFileVolumeCommon(s, f, 0, 0, direct)
	if err != nil {
		return nil, err
	}
	var size int64
	sector := 512
	var ioErr error
	if err := v.rc.Control(func(fd uintptr) {
		size, ioErr = devSize(fd)
		if n, err := devSectorSize(fd); err == nil && n >= minBlockSize && n <= maxAlign && n&(n-1) == 0 {
			sector = n
		}
	}); err != nil {
		return nil, fmt.Errorf("volume: %s: %w", s.raw, err)
	}
	if ioErr != nil {
		// Without the ioctl the end of the device still tells its size.
		if size, err = f.Seek(0, io.SeekEnd); err != nil {
			return nil, fmt.Errorf("volume: %s: size: %w", s.raw, errors.Join(ioErr, err))
		}
	}
	bs, err := s.blockSize(sector)
	if err != nil {
		return nil, err
	}
	v.bs = bs
	v.size = size - size%int64(bs)
	if v.size == 0 {
		return nil, fmt.Errorf("volume: %s: device is smaller than one %d-byte block", s.raw, bs)
	}
	v.zeroAlign = int64(sector)
	if direct {
		v.align = int64(sector)
	}
	// Device sizes are whole sectors, but be safe: never let an aligned
	// I/O run past the end.
	v.size -= v.size % int64(sector)
	if v.size == 0 {
		return nil, fmt.Errorf("volume: %s: device is smaller than one %d-byte sector", s.raw, sector)
	}
	return v, nil
}

func (v *fileVolume) Size() int64    { return v.size }
func (v *fileVolume) BlockSize() int { return v.bs }
func (v *fileVolume) String() string { return v.spec }

// wrap turns errors from a closed file into ErrClosed and adds context to
// the rest.
func (v *fileVolume) wrap(op string, off int64, err error) error {
	if v.closed.Load() || errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("volume: %s: %s at %d: %w", v.spec, op, off, err)
}

// ReadAt reads p at off, through a bounce buffer if O_DIRECT alignment
// requires.
func (v *fileVolume) ReadAt(p []byte, off int64) (int, error) {
	if err := checkIO(&v.closed, off, int64(len(p)), v.size); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	var err error
	if v.aligned(p, off) {
		err = v.pread(p, off)
	} else {
		err = v.readBounce(p, off)
	}
	if err != nil {
		return 0, v.wrap("read", off, err)
	}
	return len(p), nil
}

// WriteAt writes p at off, through a bounce buffer with read-modify-write
// if O_DIRECT alignment requires.
func (v *fileVolume) WriteAt(p []byte, off int64) (int, error) {
	if err := checkIO(&v.closed, off, int64(len(p)), v.size); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	var err error
	switch {
	case !v.direct:
		_, err = v.f.WriteAt(p, off)
	case v.aligned(p, off):
		span := stripesFor(off, off+int64(len(p)))
		v.lock(span, false)
		_, err = v.f.WriteAt(p, off)
		v.unlock(span, false)
	default:
		err = v.writeBounce(p, off)
	}
	if err != nil {
		return 0, v.wrap("write", off, err)
	}
	return len(p), nil
}

// aligned reports whether p at off can go to the file as is.
func (v *fileVolume) aligned(p []byte, off int64) bool {
	a := v.align
	return off%a == 0 && int64(len(p))%a == 0 &&
		int64(uintptr(unsafe.Pointer(unsafe.SliceData(p))))%a == 0
}

// pread reads all of p at off. The volume never extends past the file, so
// EOF means someone shrank it underneath us.
func (v *fileVolume) pread(p []byte, off int64) error {
	_, err := v.f.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readBounce reads p at off through aligned bounce buffers, a piece at a
// time.
func (v *fileVolume) readBounce(p []byte, off int64) error {
	end := off + int64(len(p))
	return v.bounced(off, end, func(win []byte, pos, w0 int64) error {
		if err := v.pread(win, w0); err != nil {
			return err
		}
		copy(p[pos-off:], win[pos-w0:min(end-w0, int64(len(win)))])
		return nil
	})
}

// writeBounce writes p at off through aligned bounce buffers. The partial
// blocks at either end are read first and merged (read-modify-write) under
// exclusive stripe locks, so no concurrent write to the other bytes of those
// blocks is lost.
func (v *fileVolume) writeBounce(p []byte, off int64) error {
	a := v.align
	end := off + int64(len(p))
	return v.bounced(off, end, func(win []byte, pos, w0 int64) error {
		w1 := w0 + int64(len(win))
		dataEnd := min(end, w1)
		head := pos > w0     // first block only partly ours
		tail := dataEnd < w1 // last block only partly ours
		span := stripesFor(w0, w1)
		excl := head || tail
		v.lock(span, excl)
		var err error
		if head {
			err = v.pread(win[:a], w0)
		}
		if err == nil && tail && !(head && w1-w0 == a) {
			err = v.pread(win[len(win)-int(a):], w1-a)
		}
		if err == nil {
			copy(win[pos-w0:], p[pos-off:dataEnd-off])
			_, err = v.f.WriteAt(win, w0)
		}
		v.unlock(span, excl)
		return err
	})
}

// bounced walks [off, end) in windows of the volume's alignment that fit
// a pooled bounce buffer, calling step with each window's piece of the
// buffer (win, which covers the volume from w0) and where the data starts
// in it (pos); the next window starts where this one's data ends. The
// first error from step ends the walk.
func (v *fileVolume) bounced(off, end int64, step func(win []byte, pos, w0 int64) error) error {
	bp := v.getBounce()
	defer v.bounce.Put(bp)
	buf := *bp
	a := v.align
	for pos := off; pos < end; {
		w0 := alignDown(pos, a)
		w1 := min(w0+int64(len(buf)), alignUp(end, a))
		if err := step(buf[:w1-w0], pos, w0); err != nil {
			return err
		}
		pos = min(end, w1)
	}
	return nil
}

// getBounce returns a bounce buffer from the pool.
func (v *fileVolume) getBounce() *[]byte {
	if bp, ok := v.bounce.Get().(*[]byte); ok {
		return bp
	}
	b := alignedBuf(bounceSize, maxAlign)
	return &b
}

// stripeSpan is a set of stripes, lo through hi inclusive, wrapping around
// past the last stripe when lo > hi.
type stripeSpan struct{ lo, hi int }

// stripesFor returns the stripes covering [off, end), end > off.
func stripesFor(off, end int64) stripeSpan {
	r0, r1 := off>>stripeShift, (end-1)>>stripeShift
	if r1-r0+1 >= nStripes {
		return stripeSpan{0, nStripes - 1}
	}
	return stripeSpan{int(r0 % nStripes), int(r1 % nStripes)}
}

// has reports whether stripe i is in the span.
func (s stripeSpan) has(i int) bool {
	if s.lo <= s.hi {
		return i >= s.lo && i <= s.hi
	}
	return i >= s.lo || i <= s.hi
}

// lock takes the span's stripes in ascending order, which rules out
// deadlock between writers holding overlapping spans.
func (v *fileVolume) lock(s stripeSpan, excl bool) {
	for i := range nStripes {
		if s.has(i) {
			if excl {
				v.stripes[i].Lock()
			} else {
				v.stripes[i].RLock()
			}
		}
	}
}

// unlock releases what lock took.
func (v *fileVolume) unlock(s stripeSpan, excl bool) {
	for i := range nStripes {
		if s.has(i) {
			if excl {
				v.stripes[i].Unlock()
			} else {
				v.stripes[i].RUnlock()
			}
		}
	}
}

// WriteZeroes zeroes the range, preferring FALLOC_FL_ZERO_RANGE (space stays
// allocated, as Write Zeroes without deallocation implies), then punching a
// hole, then writing zeroes.
func (v *fileVolume) WriteZeroes(off, n int64) error {
	return v.zero("write zeroes", off, n, []fallocMode{
		{fallocZeroRange | fallocKeepSize, &v.noZeroRange},
		{fallocPunchHole | fallocKeepSize, &v.noPunch},
	})
}

// Deallocate punches a hole (FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE),
// falling back to zeroing the range if the file system or device cannot.
func (v *fileVolume) Deallocate(off, n int64) error {
	return v.zero("deallocate", off, n, []fallocMode{
		{fallocPunchHole | fallocKeepSize, &v.noPunch},
		{fallocZeroRange | fallocKeepSize, &v.noZeroRange},
	})
}

// fallocMode is a fallocate mode to try and the flag that records that it
// is unsupported.
type fallocMode struct {
	mode        uint32
	unsupported *atomic.Bool
}

// zero makes [off, off+n) read as zeroes with the first fallocate mode that
// works, or by writing zeroes. On direct volumes only the aligned middle goes
// to fallocate (devices demand it, and it keeps partial blocks out of the
// page cache); the ends are written like any unaligned write.
func (v *fileVolume) zero(op string, off, n int64, modes []fallocMode) error {
	if err := checkIO(&v.closed, off, n, v.size); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	end := off + n
	m0, m1 := off, end
	if a := v.zeroAlign; a > 1 {
		m0, m1 = alignUp(off, a), alignDown(end, a)
		if m0 >= m1 {
			m0, m1 = off, off // no aligned middle: write it all
		}
	}
	if m1 > m0 {
		done, err := v.fallocate(m0, m1, modes)
		if err != nil {
			return v.wrap(op, m0, err)
		}
		if !done {
			m0, m1 = off, off // every mode refused: write it all
		}
	}
	if err := v.writeZeroes(off, m0); err != nil {
		return v.wrap(op, off, err)
	}
	if err := v.writeZeroes(m1, end); err != nil {
		return v.wrap(op, m1, err)
	}
	return nil
}

// fallocate applies the first supported mode to [off, end). It reports
// false if none applies, so the caller writes zeroes instead.
func (v *fileVolume) fallocate(off, end int64, modes []fallocMode) (bool, error) {
	var span stripeSpan
	if v.direct {
		// Shared: it must not run in the middle of a read-modify-write of
		// the same blocks, which would write the old data back.
		span = stripesFor(off, end)
		v.lock(span, false)
		defer v.unlock(span, false)
	}
	for _, m := range modes {
		if m.unsupported.Load() {
			continue
		}
		var err error
		if cerr := v.rc.Control(func(fd uintptr) {
			err = fallocate(fd, m.mode, off, end-off)
		}); cerr != nil {
			return false, cerr
		}
		if err == nil {
			return true, nil
		}
		if !fallocUnsupported(err) {
			return false, err
		}
		// EINVAL may be specific to this range; only "not supported at
		// all" is worth remembering.
		if !isEINVAL(err) {
			m.unsupported.Store(true)
		}
	}
	return false, nil
}

// writeZeroes writes zeroes over [off, end) through the ordinary write path,
// which handles alignment and locking.
func (v *fileVolume) writeZeroes(off, end int64) error {
	if off >= end {
		return nil
	}
	zeroes := alignedBuf(int(min(end-off, bounceSize)), maxAlign)
	for off < end {
		n := min(end-off, int64(len(zeroes)))
		if _, err := v.WriteAt(zeroes[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// Flush makes written data durable (fdatasync on Linux). On a block device
// it also flushes the device's volatile write cache.
func (v *fileVolume) Flush() error {
	if v.closed.Load() {
		return ErrClosed
	}
	if err := v.sync(); err != nil {
		return v.wrap("flush", 0, err)
	}
	return nil
}

// Close closes the file. It does not flush: durability is what Flush is for.
func (v *fileVolume) Close() error {
	if v.closed.Swap(true) {
		return ErrClosed
	}
	if err := v.f.Close(); err != nil {
		return fmt.Errorf("volume: %s: close: %w", v.spec, err)
	}
	return nil
}

// alignDown rounds x down to a multiple of a (a power of two).
func alignDown(x, a int64) int64 { return x &^ (a - 1) }

// alignUp rounds x up to a multiple of a (a power of two).
func alignUp(x, a int64) int64 { return (x + a - 1) &^ (a - 1) }

// alignedBuf returns a zeroed n-byte slice whose first byte is aligned to
// align (a power of two), as O_DIRECT needs for buffers.
func alignedBuf(n, align int) []byte {
	b := make([]byte, n+align)
	skip := (align - int(uintptr(unsafe.Pointer(unsafe.SliceData(b))))&(align-1)) & (align - 1)
	return b[skip : skip+n : skip+n]
}

package rubble

import (
	"strings"
	"sync"

	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/vfs"
)

// A primary ships every table its flushes and compactions write. Rather
// than read each one back from its file system before shipping it, the
// store's file system keeps a copy of the bytes a table file is written
// with (captures), and the primary ships that copy.
//
// The rules:
//   - A capture is the file's bytes only if the file was made by Create
//     and then only written by Write, from offset 0 in order: any other
//     call that moves or changes its contents (WriteAt, Read, Truncate)
//     spoils it. Shipping takes a capture only if its length is the
//     table's size in the edit (FileMeta.Size); otherwise it reads the
//     table from the file, as it does for a table with no capture.
//   - Captures are kept only while the store runs as a primary
//     (SetReplica with a BeforeEdit), and at most maxCaptures of them
//     and maxCaptureBytes of buffers in all; a table past either is not
//     captured. A capture growing past the slot size is spoiled.
//     A capture ends when an edit takes it, when its file is removed,
//     or when the store stops being a primary.
//   - A capture's buffer returns to the free list only after every
//     write of it into a secondary's slot has returned without error
//     (put); after a failed write it is left to the garbage collector,
//     since a connection dropped under it may not have let go of it.
const (
	maxCaptures     = 32
	maxCaptureBytes = 96 << 20
	maxFreeBuffers  = 8
)

type captures struct {
	mu     sync.Mutex
	on     bool
	byPath map[string]*capture
	bytes  int // the capacity of every live capture's buffer
	free   [][]byte
	slot   int // the largest table worth capturing (the slot size)
	// largest is the largest table captured so far: a new buffer is
	// made that large, so that a capture seldom grows (and copies).
	largest int
}

type capture struct {
	buf     []byte
	spoiled bool
}

// enable turns capturing on or off; off drops every capture.
func (c *captures) enable(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = on
	if !on {
		c.byPath, c.bytes = nil, 0
	}
}

// start begins a capture of the table file at name, or returns nil.
func (c *captures) start(name string) *capture {
	if !strings.HasSuffix(name, ".sst") {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on || len(c.byPath) >= maxCaptures || c.bytes > maxCaptureBytes-c.largest {
		return nil
	}
	if c.byPath == nil {
		c.byPath = map[string]*capture{}
	}
	if old, ok := c.byPath[name]; ok { // the file is made anew
		c.bytes -= cap(old.buf)
		c.putLocked(old.buf)
	}
	var buf []byte
	if n := len(c.free); n > 0 {
		i := mostCap(c.free)
		buf = c.free[i][:0]
		c.free[i] = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		buf = make([]byte, 0, max(c.largest, 64<<10))
	}
	cp := &capture{buf: buf}
	c.byPath[name] = cp
	c.bytes += cap(buf)
	return cp
}

// take ends the capture of name and returns its bytes if they are a
// table of size bytes, else nil.
func (c *captures) take(name string, size uint64) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.byPath[name]
	if !ok {
		return nil
	}
	delete(c.byPath, name)
	c.bytes -= cap(cp.buf)
	if cp.spoiled || uint64(len(cp.buf)) != size {
		c.putLocked(cp.buf)
		return nil
	}
	c.largest = max(c.largest, len(cp.buf))
	return cp.buf
}

// drop ends the capture of name, if any (its file is removed).
func (c *captures) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cp, ok := c.byPath[name]; ok {
		delete(c.byPath, name)
		c.bytes -= cap(cp.buf)
		c.putLocked(cp.buf)
	}
}

// put returns buffers take gave, once nothing uses them.
func (c *captures) put(bufs [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range bufs {
		c.putLocked(b)
	}
}

// putLocked keeps b for reuse: the free list holds the largest
// maxFreeBuffers buffers given back.
func (c *captures) putLocked(b []byte) {
	if cap(b) == 0 {
		return
	}
	if len(c.free) < maxFreeBuffers {
		c.free = append(c.free, b[:0])
	} else if i := leastCap(c.free); cap(c.free[i]) < cap(b) {
		c.free[i] = b[:0]
	} else {
		return
	}
}

// leastCap and mostCap are the indexes of the buffers of least and
// most capacity in bufs (not empty).
func leastCap(bufs [][]byte) int {
	j := 0
	for i, b := range bufs {
		if cap(b) < cap(bufs[j]) {
			j = i
		}
	}
	return j
}

func mostCap(bufs [][]byte) int {
	j := 0
	for i, b := range bufs {
		if cap(b) > cap(bufs[j]) {
			j = i
		}
	}
	return j
}

// write appends p to the capture; a capture that would outgrow the
// slot is spoiled (the table cannot be shipped anyway).
func (c *captures) write(cp *capture, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cp.spoiled {
		return
	}
	if len(cp.buf)+len(p) > c.slot {
		cp.spoiled, cp.buf = true, cp.buf[:0]
		return
	}
	if old := cap(cp.buf); len(cp.buf)+len(p) > old {
		cp.buf = append(cp.buf, p...)
		c.bytes += cap(cp.buf) - old
		return
	}
	cp.buf = append(cp.buf, p...)
}

func (c *captures) spoil(cp *capture) {
	c.mu.Lock()
	cp.spoiled = true
	c.mu.Unlock()
}

// captureFile is a table file being written, its bytes captured.
type captureFile struct {
	vfs.File
	c  *captures
	cp *capture
}

func (f *captureFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	if err != nil || n != len(p) {
		f.c.spoil(f.cp)
	} else {
		f.c.write(f.cp, p)
	}
	return n, err
}

func (f *captureFile) WriteAt(p []byte, off int64) (int, error) {
	f.c.spoil(f.cp)
	return f.File.WriteAt(p, off)
}

func (f *captureFile) Read(p []byte) (int, error) {
	f.c.spoil(f.cp)
	return f.File.Read(p)
}

func (f *captureFile) Truncate(size int64) error {
	f.c.spoil(f.cp)
	return f.File.Truncate(size)
}

// shippedTables returns the bytes of each table of files (new tables of
// this store's edit) and their total size: its capture, or else the file
// read whole. done returns the captured buffers for reuse; call it once
// nothing holds the tables (every slot write returned without error).
func (s *Secondary) shippedTables(files []lsm.NewFile) (tables [][]byte, size uint64, captured int, done func(), err error) {
	tables = make([][]byte, len(files))
	var reuse [][]byte
	for i, nf := range files {
		b := s.captures.take(s.tablePath(nf.Meta.FileNum), nf.Meta.Size)
		if b != nil {
			reuse = append(reuse, b)
			captured++
		} else if b, err = readTable(s.FS(), s.cfg.Dir, nf.Meta); err != nil {
			s.captures.put(reuse)
			return nil, 0, 0, func() {}, err
		}
		tables[i] = b
		size += uint64(len(b))
	}
	return tables, size, captured, func() { s.captures.put(reuse) }, nil
}

// dropCaptures ends the captures of e's new tables that shipping did not
// take (an edit with no secondary to ship to, or a moved table).
func (s *Secondary) dropCaptures(e *lsm.VersionEdit) {
	for _, nf := range e.NewFiles {
		s.captures.drop(s.tablePath(nf.Meta.FileNum))
	}
}

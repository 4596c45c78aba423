package volume

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
)

// Mem volumes allocate in chunks of this size on first write; 1 MiB wastes
// little memory on sparse writes. The chunk table has two levels, groups of
// 1024 chunk pointers (1 GiB of capacity per 8 KiB group) allocated on first
// write too, so even a huge thin volume costs only its top-level table
// (8 bytes per GiB) until written.
const (
	memChunkShift = 20
	memChunkSize  = 1 << memChunkShift
	memChunkMask  = memChunkSize - 1
	memGroupShift = 10
	memGroupMask  = 1<<memGroupShift - 1
	// maxMemSize bounds the top-level table at 8 MiB, so a typo such as
	// mem:1E fails cleanly instead of exhausting memory.
	maxMemSize = 1 << 50
)

// memGroup is the second level of the chunk table.
type memGroup [1 << memGroupShift]atomic.Pointer[memChunk]

// memChunk is one allocated chunk. Its lock makes concurrent access to the
// same bytes well defined in the Go memory model; different chunks never
// contend.
type memChunk struct {
	mu   sync.RWMutex
	data []byte
}

// memVolume is a RAM volume. A nil group or chunk pointer means that part
// reads as zeroes and costs nothing.
type memVolume struct {
	spec     string
	instance string // random: this volume's bytes, as against another's of the same spec
	size     int64
	bs       int
	groups   []atomic.Pointer[memGroup]
	closed   atomic.Bool
}

// openMem opens "mem:SIZE[?bs=N]".
func openMem(s *spec) (Volume, error) {
	if err := s.allow("bs"); err != nil {
		return nil, err
	}
	return newMemFromSpec(s)
}

// newMemFromSpec builds a mem volume from a spec whose body is the size; the
// sim backend shares it.
func newMemFromSpec(s *spec) (*memVolume, error) {
	body := s.body
	if s.kind == "sim" {
		_, body, _ = cutProfile(body)
	}
	if body == "" {
		return nil, s.errorf("missing size (e.g. %s:1GiB)", s.kind)
	}
	size, err := s.size("size", body)
	if err != nil {
		return nil, err
	}
	bs, err := s.blockSize(defaultBlockSize)
	if err != nil {
		return nil, err
	}
	if size%int64(bs) != 0 {
		return nil, s.errorf("size %d is not a multiple of the block size %d", size, bs)
	}
	if size > maxMemSize {
		return nil, s.errorf("size %s exceeds the %s limit of RAM volumes", FormatSize(size), FormatSize(maxMemSize))
	}
	return newMem(s.raw, size, bs), nil
}

// newMem returns an empty mem volume; only the top-level table is
// allocated.
func newMem(spec string, size int64, bs int) *memVolume {
	const groupBytes = 1 << (memChunkShift + memGroupShift)
	var id [16]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read does not fail
	return &memVolume{
		spec:     spec,
		instance: hex.EncodeToString(id[:]),
		size:     size,
		bs:       bs,
		groups:   make([]atomic.Pointer[memGroup], (size+groupBytes-1)/groupBytes),
	}
}

// Instance names this volume's contents: a RAM volume's bytes live only as
// long as it does, so two mem volumes of one spec are different volumes.
// The target puts it into the namespace's identifiers, so a host that
// reconnects to a target serving a new, empty volume of the same spec
// sees another namespace rather than its old one.
func (v *memVolume) Instance() string { return v.instance }

// load returns chunk i, or nil if it is unallocated.
func (v *memVolume) load(i int64) *memChunk {
	g := v.groups[i>>memGroupShift].Load()
	if g == nil {
		return nil
	}
	return g[i&memGroupMask].Load()
}

// slot returns the pointer to chunk i, allocating its group if needed.
func (v *memVolume) slot(i int64) *atomic.Pointer[memChunk] {
	gp := &v.groups[i>>memGroupShift]
	for {
		if g := gp.Load(); g != nil {
			return &g[i&memGroupMask]
		}
		// Loop rather than trust a failed CompareAndSwap: a concurrent
		// Close may have dropped the winner's group again.
		if g := new(memGroup); gp.CompareAndSwap(nil, g) {
			return &g[i&memGroupMask]
		}
	}
}

func (v *memVolume) Size() int64    { return v.size }
func (v *memVolume) BlockSize() int { return v.bs }
func (v *memVolume) String() string { return v.spec }

// InMemory reports that ReadAt and WriteAt never wait for a device, so a
// caller may run them on a latency-critical goroutine: the NVMe/TCP target
// runs them on the connection's reader instead of a goroutine per command.
func (v *memVolume) InMemory() bool { return true }

// ReadAt copies from the volume; unallocated chunks read as zeroes.
func (v *memVolume) ReadAt(p []byte, off int64) (int, error) {
	if err := checkIO(&v.closed, off, int64(len(p)), v.size); err != nil {
		return 0, err
	}
	for done := 0; done < len(p); {
		i, co, n := chunkSpan(off+int64(done), len(p)-done)
		dst := p[done : done+n]
		if c := v.load(i); c == nil {
			clear(dst)
		} else {
			c.mu.RLock()
			copy(dst, c.data[co:])
			c.mu.RUnlock()
		}
		done += n
	}
	return len(p), nil
}

// chunkSpan is the piece of an I/O at volume offset pos, with left bytes
// to go, that lies in one chunk: the chunk's index, the offset in it and
// the piece's length.
func chunkSpan(pos int64, left int) (i int64, co, n int) {
	co = int(pos & memChunkMask)
	return pos >> memChunkShift, co, min(left, memChunkSize-co)
}

// WriteAt copies into the volume, allocating chunks as needed.
func (v *memVolume) WriteAt(p []byte, off int64) (int, error) {
	if err := checkIO(&v.closed, off, int64(len(p)), v.size); err != nil {
		return 0, err
	}
	for done := 0; done < len(p); {
		i, co, n := chunkSpan(off+int64(done), len(p)-done)
		c := v.chunk(i)
		c.mu.Lock()
		copy(c.data[co:], p[done:done+n])
		c.mu.Unlock()
		done += n
	}
	return len(p), nil
}

// chunk returns chunk i, allocating it if needed. Racing allocators agree
// through CompareAndSwap; the loop covers a Deallocate freeing the chunk in
// between, which is just another ordering of concurrent commands.
func (v *memVolume) chunk(i int64) *memChunk {
	p := v.slot(i)
	for {
		if c := p.Load(); c != nil {
			return c
		}
		// The last chunk is only as long as the volume needs, so small
		// volumes stay small.
		n := min(int64(memChunkSize), v.size-i<<memChunkShift)
		c := &memChunk{data: make([]byte, n)}
		if p.CompareAndSwap(nil, c) {
			return c
		}
	}
}

// WriteZeroes zeroes the range, freeing whole chunks.
func (v *memVolume) WriteZeroes(off, n int64) error { return v.zero(off, n) }

// Deallocate is WriteZeroes: RAM has no distinction between the two.
func (v *memVolume) Deallocate(off, n int64) error { return v.zero(off, n) }

// zero makes the range read as zeroes. Whole chunks are dropped rather than
// cleared, giving the memory back as a thin-provisioned device would.
func (v *memVolume) zero(off, n int64) error {
	if err := checkIO(&v.closed, off, n, v.size); err != nil {
		return err
	}
	for end := off + n; off < end; {
		i := off >> memChunkShift
		co := int(off & memChunkMask)
		l := min(end-off, int64(memChunkSize-co))
		if c := v.load(i); c != nil {
			if co == 0 && int(l) == len(c.data) {
				v.slot(i).CompareAndSwap(c, nil)
			} else {
				c.mu.Lock()
				clear(c.data[co : co+int(l)])
				c.mu.Unlock()
			}
		}
		off += l
	}
	return nil
}

// allocated returns the bytes of chunk memory in use, for tests of lazy
// allocation.
func (v *memVolume) allocated() int64 {
	var n int64
	for gi := range v.groups {
		if g := v.groups[gi].Load(); g != nil {
			for ci := range g {
				if c := g[ci].Load(); c != nil {
					n += int64(len(c.data))
				}
			}
		}
	}
	return n
}

// Flush is a no-op: RAM is as durable as it gets.
func (v *memVolume) Flush() error {
	if v.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Close drops all memory. Commands still in flight keep the groups and
// chunks they already hold, so this needs no lock on the fast path.
func (v *memVolume) Close() error {
	if v.closed.Swap(true) {
		return ErrClosed
	}
	for i := range v.groups {
		v.groups[i].Store(nil)
	}
	return nil
}

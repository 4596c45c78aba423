package leed

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// Device is the block device a store lives on: a volume.Volume, or any
// other fixed-size device. ReadAt and WriteAt transfer all of p or fail.
type Device interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
	// Flush makes completed writes durable.
	Flush() error
}

// Options configure Format and Open. Zero values take the defaults noted.
type Options struct {
	// AvgValueSize sizes the logs at Format: the key log gets the share
	// of the device that objects of this size need (default 1024).
	AvgValueSize int
	// MaxValueSize is the largest value, fixed at Format (default 64 KiB,
	// at most 4 MiB - 1: value entries hold lengths in 22 bits).
	MaxValueSize int
	// ItemsPerSegment is how many objects a segment holds when the store
	// is full, fixed at Format (default 450: chains of about three
	// buckets, which a GET reads in one I/O).
	ItemsPerSegment int
	// Create lets Open format a device that holds no store.
	Create bool
	// Engine, if set, admits every device I/O by its cost (tokens.go).
	Engine *Engine
	// Logger receives recovery and compaction events (default
	// slog.Default()).
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.AvgValueSize <= 0 {
		o.AvgValueSize = 1024
	}
	if o.MaxValueSize <= 0 {
		o.MaxValueSize = 64 << 10
	}
	if o.ItemsPerSegment <= 0 {
		o.ItemsPerSegment = 450
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Cost is the device I/Os one operation issued itself (not those of a
// compaction it ran first): a GET is 2 (chain, value), a PUT 3 (chain,
// value, chain), a DELETE 2 (chain, chain), an EXIST 1; wrapping a log
// adds a write once per lap.
type Cost struct {
	Reads, Writes int
}

// IOs is the total of reads and writes.
func (c Cost) IOs() int { return c.Reads + c.Writes }

// PutMode says what a Put requires of the key's current state (the KV
// command set's Store options).
type PutMode uint8

const (
	// PutAny stores whether or not the key exists.
	PutAny PutMode = iota
	// PutMustExist stores only over an existing key (else ErrNotFound).
	PutMustExist
	// PutMustNotExist stores only a new key (else ErrExists).
	PutMustNotExist
)

// Runtime limits. A chain longer than maxChainLen makes its segment full;
// the reserves are the room compaction needs to make progress, refused
// to foreground writes.
const (
	maxChainLen  = 8
	nStripes     = 512
	kCompactMax  = 256     // slots a key log sub-compaction reads
	vCompactMax  = 1 << 20 // bytes a value log sub-compaction reads
	kReserveMult = 3
)

// errNoSpace: an allocation lost a race for the space ensureSpace found;
// the operation retries.
var errNoSpace = errors.New("leed: no space in log")

// Store is a LEED store on one device. It is safe for concurrent use.
//
// Locks, always taken in this order: cmu (one compaction at a time), a
// segment's stripe (its chain and SegTbl entry), then vmu (value log head)
// or kmu (key log head). A foreground operation holds its stripe across
// all of its I/Os, so a compaction moving that segment waits for it, and
// a GET never reads a value whose space was reclaimed under it.
type Store struct {
	dev  Device
	g    geometry
	log  *slog.Logger
	eng  *Engine
	vcap int64 // value log size

	// segtbl is SegTbl: per segment, slot<<6 | chain length (0: no
	// chain yet). Entry i is read and written under stripe i%nStripes.
	segtbl  []uint32
	stripes [nStripes]sync.RWMutex
	// suspect marks segments whose newest chain may have been lost to a
	// corrupt bucket found at recovery: their operations fail with
	// ErrCorrupt. Nil when recovery found none; read-only after Open.
	suspect []uint64

	cmu          sync.Mutex // one compaction at a time
	ckptSeq      uint64     // guarded by cmu
	appliedFloor uint64     // SetApplied's sequence number, in every checkpoint; guarded by cmu

	kmu   sync.Mutex    // serializes chain writes: a crash tears at most the last
	khead atomic.Uint64 // virtual slot after the last written chain; written under kmu
	ktail atomic.Uint64 // committed tail; written under cmu

	vmu   sync.Mutex    // serializes value writes: a crash tears at most the last
	vhead atomic.Uint64 // virtual byte after the last written entry; written under vmu
	vtail atomic.Uint64 // committed tail; written under cmu

	applyMu sync.Mutex
	opSeq   atomic.Uint64 // last operation sequence number assigned or applied

	objects   atomic.Int64
	liveValue atomic.Int64 // bytes of live value entries
	liveSlots atomic.Int64 // key log slots of live chains

	fgReads, fgWrites, bgReads, bgWrites atomic.Int64
	compactions, compactedBytes          atomic.Int64

	// chainBufs holds *[]byte of maxChainLen buckets, for the chain reads
	// and writes of foreground operations: a PUT would otherwise allocate
	// two chain-sized buffers (4 to 32 KiB) and leave them to the GC.
	chainBufs sync.Pool

	failed atomic.Pointer[error] // a failed write: the store refuses writes until reopened
	closed atomic.Bool
}

// Format writes an empty store on dev, sized by opts.
func Format(dev Device, opts Options) error {
	opts.defaults()
	g, err := plan(dev.Size(), opts)
	if err != nil {
		return err
	}
	var idb [8]byte
	if _, err := crand.Read(idb[:]); err != nil {
		return fmt.Errorf("leed: format: %w", err)
	}
	g.id = le.Uint64(idb[:])
	for i, b := range [][]byte{g.marshal(), checkpoint{seq: 1}.marshal(), checkpoint{}.marshal()} {
		if _, err := dev.WriteAt(b, int64(i)*BucketSize); err != nil {
			return fmt.Errorf("leed: format: %w", err)
		}
	}
	if err := dev.Flush(); err != nil {
		return fmt.Errorf("leed: format: %w", err)
	}
	return nil
}

// plan sizes the logs of a device of size bytes.
func plan(size int64, o Options) (geometry, error) {
	if o.MaxValueSize > maxValueLen {
		return geometry{}, fmt.Errorf("%w: maximum %d is above %d", ErrValueSize, o.MaxValueSize, maxValueLen)
	}
	usable := size - keyLogStart
	maxEntry := entrySize(o.MaxValueSize)
	vReserve := 3 * maxEntry
	kReserve := int64(kReserveMult * maxChainLen)
	// Key log bytes per object when full: the chains' buckets (a segment
	// of ItemsPerSegment keys, give or take the hash's spread), with 5%
	// free for compaction to work in. Every byte of it is taken from the
	// value log: at 256-byte values the key log is a tenth of the device.
	chain := math.Ceil(float64(o.ItemsPerSegment)/itemsPerBucket) + 0.1
	keyPerObj := chain * BucketSize / float64(o.ItemsPerSegment) * 1.05
	perObj := float64(entrySize(o.AvgValueSize)) + keyPerObj
	objects := float64(usable-vReserve-kReserve*BucketSize) / perObj
	if objects < 1 {
		return geometry{}, fmt.Errorf("leed: device of %d bytes is too small", size)
	}
	segments := int64(math.Ceil(objects / float64(o.ItemsPerSegment)))
	// And the reserves ensureSpace keeps (twice kReserve and the chain
	// being written), with room for one more chain.
	extra := 2*kReserve + 2*maxChainLen
	slots := int64(objects*keyPerObj/BucketSize) + extra
	slots = max(slots, int64(float64(segments)*chain)+extra)
	if slots > maxSlots {
		return geometry{}, fmt.Errorf("leed: device of %d bytes needs %d key log slots, more than %d", size, slots, maxSlots)
	}
	g := geometry{
		segments:    uint32(segments),
		slots:       uint32(slots),
		keyLogOff:   keyLogStart,
		valueLogOff: keyLogStart + slots*BucketSize,
		maxValue:    uint32(o.MaxValueSize),
	}
	g.valueLogSize = min(size-g.valueLogOff, maxValueLog)
	if g.valueLogSize < 2*vReserve {
		return geometry{}, fmt.Errorf("leed: device of %d bytes is too small for values of up to %d bytes", size, o.MaxValueSize)
	}
	return g, nil
}

// Open opens the store on dev, rebuilding SegTbl from the key log
// (recover.go). With opts.Create, a device without a store is formatted
// first.
func Open(ctx context.Context, dev Device, opts Options) (*Store, error) {
	opts.defaults()
	sb := make([]byte, BucketSize)
	if _, err := dev.ReadAt(sb, superOff); err != nil {
		return nil, fmt.Errorf("leed: read superblock: %w", err)
	}
	g, err := unmarshalGeometry(sb, dev.Size())
	if errors.Is(err, ErrNotFormatted) && opts.Create {
		if err := Format(dev, opts); err != nil {
			return nil, err
		}
		if _, err := dev.ReadAt(sb, superOff); err != nil {
			return nil, fmt.Errorf("leed: read superblock: %w", err)
		}
		g, err = unmarshalGeometry(sb, dev.Size())
	}
	if err != nil {
		return nil, err
	}
	s := &Store{dev: dev, g: g, log: opts.Logger, eng: opts.Engine, vcap: g.valueLogSize, segtbl: make([]uint32, g.segments)}
	if err := s.recover(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// segmentOf hashes a key to its segment: FNV-1a 64 of the key's bytes,
// modulo the segment count.
func (s *Store) segmentOf(key []byte) uint32 {
	h := fnv.New64a()
	h.Write(key)
	return uint32(h.Sum64() % uint64(s.g.segments))
}

func (s *Store) stripe(seg uint32) *sync.RWMutex { return &s.stripes[seg%nStripes] }

func (s *Store) isSuspect(seg uint32) bool {
	return s.suspect != nil && s.suspect[seg/64]&(1<<(seg%64)) != 0
}

func checkKey(key []byte) error {
	if len(key) == 0 || len(key) > MaxKeySize {
		return fmt.Errorf("%w: %d bytes (want 1 to %d)", ErrKeySize, len(key), MaxKeySize)
	}
	return nil
}

// keyed is where an operation on key starts: the store must be open
// (and writable, for a write) and key a valid key.
func (s *Store) keyed(key []byte, write bool) error {
	var err error
	if write {
		err = s.writable()
	} else {
		err = s.usable()
	}
	if err != nil {
		return err
	}
	return checkKey(key)
}

func (s *Store) usable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

func (s *Store) writable() error {
	if err := s.usable(); err != nil {
		return err
	}
	if e := s.failed.Load(); e != nil {
		return fmt.Errorf("leed: an earlier device write failed, reopen the store: %w", *e)
	}
	return nil
}

// fail records a failed write: what it left on the device is unknown
// until recovery looks, so no later write may build on it.
func (s *Store) fail(err error) error {
	s.failed.CompareAndSwap(nil, &err)
	return err
}

// read and write are the store's only device I/O, counted per class
// (foreground or compaction) and admitted by the engine. A failed write
// fails the store (see fail); a failed read does not.
func (s *Store) read(ctx context.Context, c *Cost, bg bool, p []byte, off int64) error {
	return s.deviceIO(ctx, c, bg, false, p, off)
}

func (s *Store) write(ctx context.Context, c *Cost, bg bool, p []byte, off int64) error {
	return s.deviceIO(ctx, c, bg, true, p, off)
}

// deviceIO does one counted, admitted read or write. Only the device's
// own write errors fail the store: a refused admission wrote nothing.
func (s *Store) deviceIO(ctx context.Context, c *Cost, bg, write bool, p []byte, off int64) error {
	if s.eng != nil {
		tok, err := s.eng.Acquire(ctx, write, len(p))
		if err != nil {
			return err
		}
		defer s.eng.Release(tok)
	}
	counter, what := &s.fgReads, "read"
	switch {
	case write && bg:
		counter, what = &s.bgWrites, "write"
	case write:
		counter, what = &s.fgWrites, "write"
	case bg:
		counter = &s.bgReads
	}
	counter.Add(1)
	if c != nil {
		if write {
			c.Writes++
		} else {
			c.Reads++
		}
	}
	var err error
	if write {
		_, err = s.dev.WriteAt(p, off)
	} else {
		_, err = s.dev.ReadAt(p, off)
	}
	if err != nil {
		err = fmt.Errorf("leed: %s %d bytes at %d: %w", what, len(p), off, err)
		if write {
			return s.fail(err)
		}
		return err
	}
	return nil
}

// readChain reads segment seg's chain in one I/O and checks every bucket
// against SegTbl. The caller holds seg's stripe.
func (s *Store) readChain(ctx context.Context, c *Cost, bg bool, seg uint32) ([]item, bucketHdr, error) {
	if s.isSuspect(seg) {
		return nil, bucketHdr{}, fmt.Errorf("%w: segment %d: its newest chain was lost to a corrupt bucket found at recovery", ErrCorrupt, seg)
	}
	e := s.segtbl[seg]
	slot, n := e>>6, int(e&63)
	if n == 0 {
		return nil, bucketHdr{}, nil
	}
	bp := s.chainBuf()
	defer s.chainBufs.Put(bp)
	buf := (*bp)[:n*BucketSize]
	if err := s.read(ctx, c, bg, buf, s.g.keyLogOff+int64(slot)*BucketSize); err != nil {
		return nil, bucketHdr{}, err
	}
	return s.decodeChain(buf, seg, slot)
}

// chainBuf returns a buffer of maxChainLen buckets from the pool; the
// caller puts it back when no slice of it is in use.
func (s *Store) chainBuf() *[]byte {
	if bp, ok := s.chainBufs.Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, maxChainLen*BucketSize)
	return &b
}

// decodeChain decodes and checks seg's chain of len(buf)/BucketSize
// buckets read from slot: each bucket whole, of this store, of seg, in
// its place in one chain starting at slot. The items are copies.
func (s *Store) decodeChain(buf []byte, seg, slot uint32) ([]item, bucketHdr, error) {
	n := len(buf) / BucketSize
	var items []item
	var h0 bucketHdr
	for i := 0; i < n; i++ {
		h, its, err := decodeBucket(buf[i*BucketSize:], items)
		if err != nil {
			return nil, h0, fmt.Errorf("segment %d, chain at slot %d, bucket %d: %w", seg, slot, i, err)
		}
		items = its
		if i == 0 {
			h0 = h
		}
		switch {
		case h.flags&flagSkip != 0 || h.storeID != s.g.id:
			return nil, h0, fmt.Errorf("%w: segment %d, slot %d: not a bucket of this store's chain", ErrCorrupt, seg, int(slot)+i)
		case h.segment != seg || int(h.chainLen) != n || int(h.pos) != i || h.chainVirt != h0.chainVirt || h.chainVirt%uint64(s.g.slots) != uint64(slot):
			return nil, h0, fmt.Errorf("%w: segment %d, slot %d holds bucket %d/%d of segment %d at virtual slot %d", ErrCorrupt, seg, int(slot)+i, h.pos, h.chainLen, h.segment, h.chainVirt)
		}
	}
	return items, h0, nil
}

// find returns the index of key in items, or -1.
func find(items []item, key []byte) int {
	for i := range items {
		if bytes.Equal(items[i].keyBytes(), key) {
			return i
		}
	}
	return -1
}

// chainLen is the buckets n items take (at least one: an empty chain
// records that its segment's keys were deleted).
func chainLen(n int) int { return max(1, (n+itemsPerBucket-1)/itemsPerBucket) }

// Key log slots an allocation must leave free, by who allocates: a
// foreground operation leaves room for both compactions, a value
// compaction (which rewrites chains) leaves room for a key compaction,
// and a key compaction, which frees at least what it uses, may take the
// last slot.
const (
	keepForeground = kReserveMult * maxChainLen
	keepValueMoves = 2 * maxChainLen
	keepKeyMoves   = 0
)

// writeChain writes seg's chain of items at the key log's head, leaving
// keep slots free, and returns its SegTbl entry. bg counts its I/O as
// compaction's.
func (s *Store) writeChain(ctx context.Context, c *Cost, bg bool, keep uint64, seg uint32, items []item, opSeq uint64) (uint32, error) {
	n := chainLen(len(items))
	if n > maxChainLen {
		return 0, fmt.Errorf("%w: segment %d would need a chain of %d buckets (at most %d)", ErrFull, seg, n, maxChainLen)
	}
	bp := s.chainBuf()
	defer s.chainBufs.Put(bp)
	buf := (*bp)[:n*BucketSize]
	s.kmu.Lock()
	defer s.kmu.Unlock()
	slots := uint64(s.g.slots)
	head := s.khead.Load()
	phys := head % slots
	skip := uint64(0)
	if phys+uint64(n) > slots {
		skip = slots - phys
	}
	free := slots - (head - s.ktail.Load())
	if free < skip+uint64(n)+keep {
		return 0, errNoSpace
	}
	if skip > 0 {
		m := make([]byte, BucketSize)
		encodeBucket(m, bucketHdr{chainVirt: head, chainLen: uint8(min(skip, MaxChain)), flags: flagSkip, storeID: s.g.id}, nil)
		if err := s.write(ctx, c, bg, m, s.g.keyLogOff+int64(phys)*BucketSize); err != nil {
			return 0, err
		}
		head += skip
		s.khead.Store(head)
		phys = 0
	}
	for i := 0; i < n; i++ {
		var flags uint8
		if i == 0 {
			flags |= flagHead
		}
		if i == n-1 {
			flags |= flagTail
		}
		lo := min(i*itemsPerBucket, len(items))
		hi := min(lo+itemsPerBucket, len(items))
		encodeBucket(buf[i*BucketSize:], bucketHdr{
			chainVirt: head, segment: seg, chainLen: uint8(n), pos: uint8(i), flags: flags,
			opSeq: opSeq, vhead: s.vhead.Load(), storeID: s.g.id,
		}, items[lo:hi])
	}
	if err := s.write(ctx, c, bg, buf, s.g.keyLogOff+int64(phys)*BucketSize); err != nil {
		return 0, err
	}
	s.khead.Store(head + uint64(n))
	return uint32(phys)<<6 | uint32(n), nil
}

// writeValues appends already-encoded value entries at the value log's
// head and returns the physical offset of each. Entries that do not fit
// before the end of the lap go to its start, after a pad shorter than
// one entry, so the log wastes less than one entry per lap. It writes
// each contiguous run in one I/O (one, or two at a lap's end).
// Foreground allocations leave two maximum entries free for compaction.
func (s *Store) writeValues(ctx context.Context, c *Cost, bg bool, entries ...[]byte) ([]int64, error) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	head := s.vhead.Load()
	phys := int64(head % uint64(s.vcap))
	offs := make([]int64, len(entries))
	split, pad := len(entries), int64(0) // entries[split:] go to the lap's start
	at, size := phys, int64(0)
	for i, e := range entries {
		if split == len(entries) && at+int64(len(e)) > s.vcap {
			split, pad, at = i, s.vcap-at, 0
		}
		offs[i] = at
		at += int64(len(e))
		size += int64(len(e))
	}
	free := s.vcap - int64(head-s.vtail.Load())
	need := pad + size
	if !bg {
		need += 2 * entrySize(int(s.g.maxValue))
	}
	if free < need {
		return nil, errNoSpace
	}
	run := func(es [][]byte, off int64) error {
		if len(es) == 0 {
			return nil
		}
		return s.write(ctx, c, bg, bytes.Join(es, nil), s.g.valueLogOff+off)
	}
	if err := run(entries[:split], phys); err != nil {
		return nil, err
	}
	if split < len(entries) {
		if pad >= entryHdrSize {
			p := make([]byte, entryHdrSize)
			putEntryHdr(p, padSegment, 0)
			le.PutUint32(p[0:], crc(p[4:]))
			if err := s.write(ctx, c, bg, p, s.g.valueLogOff+s.vcap-pad); err != nil {
				return nil, err
			}
		}
		if err := run(entries[split:], 0); err != nil {
			return nil, err
		}
	}
	// vhead moves only once the entries are whole: chains record it, and
	// recovery trusts every entry before the largest one recorded.
	s.vhead.Store(head + uint64(pad+size))
	return offs, nil
}

// ensureSpace makes room, compacting if it must, for a value entry of
// vneed bytes and a chain of kneed slots; ErrFull when the live data
// leaves none.
func (s *Store) ensureSpace(ctx context.Context, vneed, kneed int64) error {
	maxEntry := entrySize(int(s.g.maxValue))
	vReserve := 3 * maxEntry
	kReserve := int64(kReserveMult*maxChainLen) + kneed
	slots := int64(s.g.slots)
	// Full is decided on live data, leaving twice the reserves, so that
	// compaction can always turn enough dead space into free space; the
	// sub-compactions one operation may wait for are bounded by two
	// passes over both logs.
	limit := 2*(s.vcap/vCompactMax+slots/kCompactMax) + 16
	for tries := int64(0); ; tries++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if vneed > 0 && s.liveValue.Load()+vneed > s.vcap-2*vReserve {
			return fmt.Errorf("%w: value log holds %d live bytes of %d", ErrFull, s.liveValue.Load(), s.vcap)
		}
		if s.liveSlots.Load()+kneed > slots-2*kReserve {
			return fmt.Errorf("%w: key log holds %d live buckets of %d", ErrFull, s.liveSlots.Load(), slots)
		}
		vfree := s.vcap - int64(s.vhead.Load()-s.vtail.Load())
		kfree := slots - int64(s.khead.Load()-s.ktail.Load())
		vok := vneed == 0 || vfree >= vneed+vReserve
		kok := kfree >= kneed+kReserve
		if vok && kok {
			// Low water, with enough dead data to be worth reclaiming: one
			// sub-compaction, unless one already runs.
			// The log compacted is the one at low water: moving the live
			// values of a log with nothing dead in it frees nothing and
			// rewrites every chain.
			vdead := s.vcap - vfree - s.liveValue.Load()
			kdead := slots - kfree - s.liveSlots.Load()
			vlow := vfree < s.vcap/8 && vdead > s.vcap/16
			klow := kfree < slots/8 && kdead > slots/16
			if (vlow || klow) && s.cmu.TryLock() {
				_, err := s.compactOnce(ctx, vlow)
				s.cmu.Unlock()
				if err != nil {
					return err
				}
			}
			return nil
		}
		s.cmu.Lock()
		progress, err := s.compactOnce(ctx, !vok)
		s.cmu.Unlock()
		if err != nil {
			return err
		}
		if !progress && tries > 8 || tries > limit {
			return fmt.Errorf("%w: compaction frees no more space", ErrFull)
		}
	}
}

// Get returns key's value. It costs two device reads: the chain and the
// value.
func (s *Store) Get(ctx context.Context, key []byte) ([]byte, Cost, error) {
	return s.get(ctx, key, true)
}

// get finds key in its segment's chain (ErrNotFound if it is not there)
// and, with value, reads its value.
func (s *Store) get(ctx context.Context, key []byte, value bool) ([]byte, Cost, error) {
	var c Cost
	if err := s.keyed(key, false); err != nil {
		return nil, c, err
	}
	seg := s.segmentOf(key)
	mu := s.stripe(seg)
	mu.RLock()
	defer mu.RUnlock()
	items, _, err := s.readChain(ctx, &c, false, seg)
	if err != nil {
		return nil, c, err
	}
	i := find(items, key)
	if i < 0 {
		return nil, c, ErrNotFound
	}
	if !value {
		return nil, c, nil
	}
	v, err := s.readValue(ctx, &c, false, seg, &items[i])
	return v, c, err
}

// readValue reads and checks the value an item points at.
func (s *Store) readValue(ctx context.Context, c *Cost, bg bool, seg uint32, it *item) ([]byte, error) {
	n := entrySize(int(it.vlen))
	if it.voff < 0 || it.voff+n > s.vcap {
		return nil, fmt.Errorf("%w: key %q: value at %d of %d bytes is outside the value log", ErrCorrupt, it.keyBytes(), it.voff, n)
	}
	buf := make([]byte, n)
	if err := s.read(ctx, c, bg, buf, s.g.valueLogOff+it.voff); err != nil {
		return nil, err
	}
	e := decodeEntryHdr(buf)
	if !checkEntry(buf) || e.segment != seg || e.vlen != it.vlen {
		return nil, fmt.Errorf("%w: key %q: value entry at %d fails its checksum or names segment %d, length %d (want %d, %d)", ErrCorrupt, it.keyBytes(), it.voff, e.segment, e.vlen, seg, it.vlen)
	}
	return buf[entryHdrSize:], nil
}

// Exist reports whether key has a value (nil) or not (ErrNotFound), in
// one device read.
func (s *Store) Exist(ctx context.Context, key []byte) (Cost, error) {
	_, c, err := s.get(ctx, key, false)
	return c, err
}

// Put stores value under key, as mode allows. It costs three device I/Os
// (read the chain, append the value, write the chain), plus those of a
// compaction it may have to run first. On any error nothing changed.
func (s *Store) Put(ctx context.Context, key, value []byte, mode PutMode) (Cost, error) {
	return s.put(ctx, key, value, mode, s.opSeq.Add(1))
}

// Delete removes key (ErrNotFound if it has no value), in two device I/Os.
func (s *Store) Delete(ctx context.Context, key []byte) (Cost, error) {
	return s.del(ctx, key, s.opSeq.Add(1))
}

func (s *Store) put(ctx context.Context, key, value []byte, mode PutMode, seq uint64) (Cost, error) {
	var c Cost
	if err := s.keyed(key, true); err != nil {
		return c, err
	}
	if len(value) > int(s.g.maxValue) {
		return c, fmt.Errorf("%w: %d bytes, at most %d", ErrValueSize, len(value), s.g.maxValue)
	}
	seg := s.segmentOf(key)
	size := entrySize(len(value))
	entry := make([]byte, size)
	encodeEntry(entry, seg, value)
	for {
		mu := s.stripe(seg)
		mu.RLock()
		cur := int64(s.segtbl[seg] & 63)
		mu.RUnlock()
		if err := s.ensureSpace(ctx, size, cur+1); err != nil {
			return c, err
		}
		mu.Lock()
		err := s.putLocked(ctx, &c, seg, key, entry, mode, seq)
		mu.Unlock()
		if !errors.Is(err, errNoSpace) {
			return c, err
		}
		c = Cost{}
	}
}

func (s *Store) putLocked(ctx context.Context, c *Cost, seg uint32, key, entry []byte, mode PutMode, seq uint64) error {
	items, _, err := s.readChain(ctx, c, false, seg)
	if err != nil {
		return err
	}
	oldLen := int64(s.segtbl[seg] & 63)
	i := find(items, key)
	switch {
	case i < 0 && mode == PutMustExist:
		return ErrNotFound
	case i >= 0 && mode == PutMustNotExist:
		return ErrExists
	}
	var old int64
	if i < 0 {
		if chainLen(len(items)+1) > maxChainLen {
			return fmt.Errorf("%w: segment %d holds %d keys, its chain can grow no longer", ErrFull, seg, len(items))
		}
		var it item
		copy(it.key[:], key)
		it.klen = uint8(len(key))
		items = append(items, it)
		i = len(items) - 1
	} else {
		old = entrySize(int(items[i].vlen))
	}
	voff, err := s.writeValues(ctx, c, false, entry)
	if err != nil {
		return err
	}
	items[i].vlen = uint32(len(entry) - entryHdrSize)
	items[i].voff = voff[0]
	e, err := s.writeChain(ctx, c, false, keepForeground, seg, items, seq)
	if err != nil {
		return err
	}
	s.segtbl[seg] = e
	if old == 0 {
		s.objects.Add(1)
	}
	s.liveValue.Add(int64(len(entry)) - old)
	s.liveSlots.Add(int64(e&63) - oldLen)
	return nil
}

func (s *Store) del(ctx context.Context, key []byte, seq uint64) (Cost, error) {
	var c Cost
	if err := s.keyed(key, true); err != nil {
		return c, err
	}
	seg := s.segmentOf(key)
	for {
		mu := s.stripe(seg)
		mu.RLock()
		cur := int64(s.segtbl[seg] & 63)
		mu.RUnlock()
		if err := s.ensureSpace(ctx, 0, max(cur, 1)); err != nil {
			return c, err
		}
		mu.Lock()
		err := s.delLocked(ctx, &c, seg, key, seq)
		mu.Unlock()
		if !errors.Is(err, errNoSpace) {
			return c, err
		}
		c = Cost{}
	}
}

func (s *Store) delLocked(ctx context.Context, c *Cost, seg uint32, key []byte, seq uint64) error {
	items, _, err := s.readChain(ctx, c, false, seg)
	if err != nil {
		return err
	}
	i := find(items, key)
	if i < 0 {
		return ErrNotFound
	}
	old := entrySize(int(items[i].vlen))
	oldLen := int64(s.segtbl[seg] & 63)
	items = slices.Delete(items, i, i+1)
	e, err := s.writeChain(ctx, c, false, keepForeground, seg, items, seq)
	if err != nil {
		return err
	}
	s.segtbl[seg] = e
	s.objects.Add(-1)
	s.liveValue.Add(-old)
	s.liveSlots.Add(int64(e&63) - oldLen)
	return nil
}

// List returns up to max keys in the store's order, starting at start:
// segments in ascending order (a key's segment is the FNV-1a 64 hash of
// its bytes modulo the segment count), and within a segment keys in
// ascending byte order. The keys of start's segment that sort before
// start are skipped; start need not exist. A nil start lists from the
// first segment.
func (s *Store) List(ctx context.Context, start []byte, max int) ([][]byte, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	first := uint32(0)
	if start != nil {
		if err := checkKey(start); err != nil {
			return nil, err
		}
		first = s.segmentOf(start)
	}
	var out [][]byte
	for seg := first; seg < s.g.segments && len(out) < max; seg++ {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		mu := s.stripe(seg)
		mu.RLock()
		items, _, err := s.readChain(ctx, nil, false, seg)
		mu.RUnlock()
		if err != nil {
			return out, err
		}
		keys := make([][]byte, 0, len(items))
		for i := range items {
			k := items[i].keyBytes()
			if seg == first && start != nil && bytes.Compare(k, start) < 0 {
				continue
			}
			keys = append(keys, bytes.Clone(k))
		}
		slices.SortFunc(keys, bytes.Compare)
		out = append(out, keys[:min(len(keys), max-len(out))]...)
	}
	return out, nil
}

// OpKind is the kind of an ordered operation.
type OpKind uint8

const (
	// OpPut stores Value under Key as Mode allows.
	OpPut OpKind = iota + 1
	// OpDelete removes Key.
	OpDelete
)

// Op is one write, numbered by whoever orders the writes (the head of a
// replication chain). Seq starts at 1 and has no gaps.
type Op struct {
	Seq   uint64
	Kind  OpKind
	Key   []byte
	Value []byte
	Mode  PutMode
}

// Apply executes op if its sequence number is the next one: an op already
// applied (Seq <= Applied()) is a no-op returning nil, so a chain may
// re-ship after a failover; one past the next fails with ErrSeqGap. Calls
// are serialized. Every chain write records the sequence number of the
// op that made it, so after a crash Applied() is the last op whose effect
// is on the device; an op that failed with ErrNotFound or ErrExists
// changed nothing, and re-applied gives the same answer. A store takes
// either Apply or Put and Delete, not both.
func (s *Store) Apply(ctx context.Context, op Op) (Cost, error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	cur := s.opSeq.Load()
	switch {
	case op.Seq <= cur:
		return Cost{}, nil
	case op.Seq != cur+1:
		return Cost{}, fmt.Errorf("%w: op %d after %d", ErrSeqGap, op.Seq, cur)
	}
	var c Cost
	var err error
	switch op.Kind {
	case OpPut:
		c, err = s.put(ctx, op.Key, op.Value, op.Mode, op.Seq)
	case OpDelete:
		c, err = s.del(ctx, op.Key, op.Seq)
	default:
		return c, fmt.Errorf("leed: op %d has unknown kind %d", op.Seq, op.Kind)
	}
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrExists) {
		s.opSeq.Store(op.Seq)
	}
	return c, err
}

// Import stores value under key as part of copying another replica's
// state (after Format, before SetApplied): it takes no sequence number
// and its chain records none, so Applied() is what SetApplied sets.
func (s *Store) Import(ctx context.Context, key, value []byte) (Cost, error) {
	return s.ImportBatch(ctx, []KV{{key, value}})
}

// KV is a key and its value, as ImportBatch takes them.
type KV struct {
	Key, Value []byte
}

// ImportBatch is Import of many objects at once, for loading a store or
// copying another replica: it groups them by segment and, per segment,
// reads the chain once, appends the segment's values in one write and
// writes the chain once, so a batch of n objects over m segments costs
// about 3m device I/Os rather than 3n. A key given twice keeps its last
// value. On an error, the segments already written keep their objects.
func (s *Store) ImportBatch(ctx context.Context, kvs []KV) (Cost, error) {
	var c Cost
	if err := s.writable(); err != nil {
		return c, err
	}
	bySeg := map[uint32][]int{}
	for i, kv := range kvs {
		if err := checkKey(kv.Key); err != nil {
			return c, err
		}
		if len(kv.Value) > int(s.g.maxValue) {
			return c, fmt.Errorf("%w: %d bytes, at most %d", ErrValueSize, len(kv.Value), s.g.maxValue)
		}
		seg := s.segmentOf(kv.Key)
		bySeg[seg] = append(bySeg[seg], i)
	}
	segs := make([]uint32, 0, len(bySeg))
	for seg := range bySeg {
		segs = append(segs, seg)
	}
	slices.Sort(segs)
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	for _, seg := range segs {
		if err := ctx.Err(); err != nil {
			return c, err
		}
		entries := make([][]byte, 0, len(bySeg[seg]))
		keys := make([][]byte, 0, len(bySeg[seg]))
		var vneed int64
		for _, i := range bySeg[seg] {
			e := make([]byte, entrySize(len(kvs[i].Value)))
			encodeEntry(e, seg, kvs[i].Value)
			entries = append(entries, e)
			keys = append(keys, kvs[i].Key)
			vneed += int64(len(e))
		}
		for {
			mu := s.stripe(seg)
			mu.RLock()
			cur := int(s.segtbl[seg] & 63)
			mu.RUnlock()
			if err := s.ensureSpace(ctx, vneed, int64(min(maxChainLen, cur+chainLen(len(keys))))); err != nil {
				return c, err
			}
			mu.Lock()
			err := s.importLocked(ctx, &c, seg, keys, entries)
			mu.Unlock()
			if !errors.Is(err, errNoSpace) {
				if err != nil {
					return c, err
				}
				break
			}
		}
	}
	return c, nil
}

// importLocked stores keys[i] → entries[i] in seg, whose stripe the
// caller holds: one chain read, one value write, one chain write.
func (s *Store) importLocked(ctx context.Context, c *Cost, seg uint32, keys, entries [][]byte) error {
	items, _, err := s.readChain(ctx, c, false, seg)
	if err != nil {
		return err
	}
	oldLen := int64(s.segtbl[seg] & 63)
	// Keys new to the segment are appended; a key given twice in the
	// batch keeps its last value (the earlier one is written, and dead).
	idx := make([]int, len(keys))
	orig := len(items)
	replaced := map[int]bool{}
	var oldBytes int64
	for j, k := range keys {
		i := find(items, k)
		if i < 0 {
			var it item
			copy(it.key[:], k)
			it.klen = uint8(len(k))
			items = append(items, it)
			i = len(items) - 1
		} else if i < orig && !replaced[i] {
			replaced[i] = true
			oldBytes += entrySize(int(items[i].vlen))
		}
		idx[j] = i
	}
	if chainLen(len(items)) > maxChainLen {
		return fmt.Errorf("%w: segment %d would hold %d keys, its chain can grow no longer", ErrFull, seg, len(items))
	}
	offs, err := s.writeValues(ctx, c, false, entries...)
	if err != nil {
		return err
	}
	last := map[int]int{} // item → the batch entry it ends with
	for j, i := range idx {
		items[i].vlen = uint32(len(entries[j]) - entryHdrSize)
		items[i].voff = offs[j]
		last[i] = j
	}
	var newBytes int64
	for _, j := range last {
		newBytes += int64(len(entries[j]))
	}
	e, err := s.writeChain(ctx, c, false, keepForeground, seg, items, 0)
	if err != nil {
		return err
	}
	s.segtbl[seg] = e
	s.objects.Add(int64(len(items) - orig))
	s.liveValue.Add(newBytes - oldBytes)
	s.liveSlots.Add(int64(e&63) - oldLen)
	return nil
}

// SetApplied records, durably, that the store holds every operation up to
// seq (the end of a copy of another replica): it writes a checkpoint
// carrying seq, which recovery takes as a floor for Applied(), and
// flushes. Later Apply calls continue at seq+1.
func (s *Store) SetApplied(ctx context.Context, seq uint64) error {
	if err := s.writable(); err != nil {
		return err
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.cmu.Lock()
	defer s.cmu.Unlock()
	prev := s.appliedFloor
	s.appliedFloor = seq
	if err := s.commit(ctx, s.ktail.Load(), s.vtail.Load()); err != nil {
		s.appliedFloor = prev
		return err
	}
	s.opSeq.Store(seq)
	return nil
}

// Applied is the sequence number of the last operation applied.
func (s *Store) Applied() uint64 { return s.opSeq.Load() }

// Stats are a store's counters.
type Stats struct {
	Objects        int64
	Segments       int
	SegTblBytes    int64 // the in-memory index: 4 bytes per segment
	LiveValueBytes int64
	LiveKeySlots   int64
	KeyLogSlots    int64
	ValueLogBytes  int64
	DeviceBytes    int64
	// Device I/Os issued by operations and by compactions.
	Reads, Writes                     int64
	CompactionReads, CompactionWrites int64
	Compactions, CompactedBytes       int64
	MaxValueSize                      int
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Objects:          s.objects.Load(),
		Segments:         len(s.segtbl),
		SegTblBytes:      int64(len(s.segtbl))*4 + int64(len(s.suspect))*8,
		LiveValueBytes:   s.liveValue.Load(),
		LiveKeySlots:     s.liveSlots.Load(),
		KeyLogSlots:      int64(s.g.slots),
		ValueLogBytes:    s.vcap,
		DeviceBytes:      s.dev.Size(),
		Reads:            s.fgReads.Load(),
		Writes:           s.fgWrites.Load(),
		CompactionReads:  s.bgReads.Load(),
		CompactionWrites: s.bgWrites.Load(),
		Compactions:      s.compactions.Load(),
		CompactedBytes:   s.compactedBytes.Load(),
		MaxValueSize:     int(s.g.maxValue),
	}
}

// MaxValueSize is the largest value the store takes.
func (s *Store) MaxValueSize() int { return int(s.g.maxValue) }

// Flush makes completed operations durable on devices with a volatile
// cache (files).
func (s *Store) Flush() error {
	if err := s.dev.Flush(); err != nil {
		return fmt.Errorf("leed: flush: %w", err)
	}
	return nil
}

// Close writes a checkpoint of both logs' heads, so that recovery
// treats any damage up to them as corruption rather than a torn last
// write, flushes and closes the store; it does not close the device.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.failed.Load() == nil {
		s.cmu.Lock()
		err := s.commit(context.Background(), s.ktail.Load(), s.vtail.Load())
		s.cmu.Unlock()
		if err != nil {
			return err
		}
	}
	return s.Flush()
}

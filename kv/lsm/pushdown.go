package lsm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// Pushdown Get (docs/LSM.md, "Pushdown Get"): with Options.Pusher set, a
// Get whose in-memory part (split.go) leaves an on-disk plan sends that
// plan as one pushdown request running the standard function lsm_get
// (functions/src/lsm_get.c) over the plan's tables, whose file table is
// the tables' versioned extent maps. One round trip replaces one read per
// table and block.
//
// What the Get sees stays the engine's: the read state's version holds
// every plan table (a table is deleted only when no version holds it), and
// the file system checks the extent-map versions at the target and again
// when the result comes back, running the request on the host when they
// do not match (offloadfs.FS.Pushdown). Whatever cannot run as a pushdown
// — a key too long for the function, a table not on the Pusher's file
// system, a function error — runs the plan with ordinary reads instead,
// and is counted; those reads check every block's checksum.

// Pusher runs pushdown requests over files at the storage node holding
// them, with a host-side run when the node cannot (extent maps it does not
// hold, or that changed under the request). *offloadfs.FS is one: a store
// opened on its VFS with it as Pusher pushes Gets down.
type Pusher interface {
	// RegisterFunction makes a function module available to Pushdown
	// (at the node and for host-side runs) and returns its ID.
	RegisterFunction(ctx context.Context, module []byte) (sandbox.ID, error)
	// PushdownInto runs fn from start over files (1 to 16) with scratch
	// as its initial scratch; the result's Output is the final scratch,
	// copied into buf's array as append(buf[:0], ...) would.
	PushdownInto(ctx context.Context, fn sandbox.ID, files []*offloadfs.File, start host.Start, scratch, buf []byte) (pushdown.Result, error)
}

// Layout of lsm_get's scratch (functions/include/lsm.h).
const (
	lgMagic      = 0x676d736c
	lgMaxTables  = 16
	lgMaxKey     = 512
	lgOffPlan    = 64
	lgOffKey     = 320
	lgOffValue   = 64 // the result: this header, then the value
	lgValueMax   = sandbox.ScratchSize - lgOffValue
	lgHeaderSize = lgOffKey // the request before the key

	lgPending  = 0
	lgSet      = 1
	lgSetBlock = 2
	lgDel      = 3
	lgAbsent   = 4

	lgStateData = 0
	lgStateTop  = 1
	lgPlanData  = 0
	lgPlanIndex = 1
)

// PushdownStats count what Gets did with their on-disk part.
type PushdownStats struct {
	// InMemory are Gets answered without I/O (memtables, cached blocks,
	// filters).
	InMemory uint64
	// Pushed are the pushdown requests sent; each is one round trip when
	// it runs at the node.
	Pushed uint64
	// HostRuns are pushed requests the file system ran on the host
	// instead: the node refused them (extent maps it does not hold) or
	// their result was discarded (a map changed while they ran).
	HostRuns uint64
	// Sampled are Gets that took the ordinary read path to keep the block
	// cache warm (Options.CacheSampleRate).
	Sampled uint64
	// Plain are Gets whose plan ran with ordinary reads because it could
	// not be pushed (key too long, a file not on the Pusher's file system,
	// pushdown error); BlockReads are the values longer than lsm_get's
	// result that the host read itself.
	Plain, BlockReads uint64
	// TablesSearched are the plan tables lsm_get searched at the node,
	// BlocksSearched the blocks.
	TablesSearched, BlocksSearched uint64
}

// pushState is a store's pushdown configuration and counters.
type pushState struct {
	p          Pusher
	fn         sandbox.ID
	sampleRate float64
	valueCap   uint32

	inMemory, pushed, hostRuns, sampled, plain, blockReads atomic.Uint64
	tables, blocks                                         atomic.Uint64

	bufs sync.Pool // *pushBufs, recycled from Get to Get
}

// openPushdown registers lsm_get with opts.Pusher.
func openPushdown(ctx context.Context, opts *Options) (*pushState, error) {
	mod := opts.PushdownModule
	if mod == nil {
		var err error
		kind := opts.PushdownRuntime
		if kind == 0 {
			kind = sandbox.KindWasm
		}
		if mod, err = functions.Module("lsm_get", kind); err != nil {
			return nil, err
		}
	}
	fn, err := opts.Pusher.RegisterFunction(ctx, mod)
	if err != nil {
		return nil, fmt.Errorf("lsm: registering lsm_get: %w", err)
	}
	ps := &pushState{p: opts.Pusher, fn: fn, sampleRate: opts.CacheSampleRate, valueCap: lgValueMax}
	if ps.sampleRate == 0 {
		ps.sampleRate = DefaultCacheSampleRate
	}
	return ps, nil
}

// PushdownStats returns the pushdown counters (zero without a Pusher).
func (d *DB) PushdownStats() PushdownStats {
	ps := d.pd
	if ps == nil {
		return PushdownStats{}
	}
	return PushdownStats{
		InMemory: ps.inMemory.Load(), Pushed: ps.pushed.Load(), HostRuns: ps.hostRuns.Load(),
		Sampled: ps.sampled.Load(), Plain: ps.plain.Load(), BlockReads: ps.blockReads.Load(),
		TablesSearched: ps.tables.Load(), BlocksSearched: ps.blocks.Load(),
	}
}

// getSplit is Get with query splitting: the in-memory part, then the plan
// pushed down (or, for sampled Gets, read through the cache).
func (d *DB) getSplit(key []byte, snap SeqNum) ([]byte, error) {
	rs, err := d.loadReadState()
	if err != nil {
		return nil, err
	}
	defer d.releaseReadState(rs)
	ps := d.pd
	b := ps.getBufs()
	defer ps.putBufs(b) // after s.release
	s := d.splitInto(rs, key, snap, b)
	defer s.release()
	if s.done {
		ps.inMemory.Add(1)
		return s.value, s.err
	}
	if ps.sampleRate > 0 && rand.Float64() < ps.sampleRate {
		ps.sampled.Add(1)
		return runPlainly(s.plan, key, snap)
	}
	return d.runPushdown(context.Background(), b, s.plan, key, snap)
}

// errNotPushable marks a plan that cannot be pushed down.
var errNotPushable = errors.New("lsm: plan cannot be pushed down")

// runPushdown runs a plan as pushdown requests of at most 16 tables each,
// falling back to ordinary reads when a request cannot run.
func (d *DB) runPushdown(ctx context.Context, b *pushBufs, plan []planTable, key []byte, snap SeqNum) ([]byte, error) {
	ps := d.pd
	for len(plan) > 0 {
		n := min(len(plan), lgMaxTables)
		chunk := plan[:n]
		plan = plan[n:]
		st, at, val, err := ps.push(ctx, b, chunk, key, snap, false)
		if err != nil {
			d.log.Debug("lsm: pushdown get ran plainly", "err", err)
			ps.plain.Add(1)
			return runPlainly(append(chunk, plan...), key, snap)
		}
		switch st {
		case lgAbsent:
			continue
		case lgSetBlock:
			ps.blockReads.Add(1)
			return runPlainly(chunk[at:at+1], key, snap)
		default:
			return answer(val)
		}
	}
	return nil, ErrNotFound
}

// answer is Get's answer for the value decode returned for lgSet or
// lgDel: a copy of it, or ErrNotFound for nil.
func answer(val []byte) ([]byte, error) {
	if val == nil {
		return nil, ErrNotFound
	}
	return slices.Clone(val), nil
}

// pushBufs are what one Get with query splitting builds its search key and
// plan in, and encodes its request and receives its result in, recycled
// from Get to Get (pushState.bufs).
type pushBufs struct {
	sk      [64]byte // longer search keys are allocated
	plan    [lgMaxTables]planTable
	files   [lgMaxTables]*offloadfs.File
	scratch [lgOffKey + lgMaxKey]byte
	out     [sandbox.ScratchSize]byte
}

// getBufs returns a recycled pushBufs or a new one.
func (ps *pushState) getBufs() *pushBufs {
	if b, _ := ps.bufs.Get().(*pushBufs); b != nil {
		return b
	}
	return new(pushBufs)
}

// putBufs recycles b, holding no table.
func (ps *pushState) putBufs(b *pushBufs) {
	clear(b.plan[:])
	ps.bufs.Put(b)
}

// push sends one request for plan (at most 16 tables), starting each table
// at its data block, or with fromIndex at its top-level index, encoded in
// and answered into b. It returns the status, the plan entry that settled
// it and, for lgSet and lgDel, the value (nil if the entry is a deletion or
// deleted by a range tombstone), which aliases b.
func (ps *pushState) push(ctx context.Context, b *pushBufs, plan []planTable, key []byte, snap SeqNum, fromIndex bool) (status uint32, at int, val []byte, err error) {
	if len(plan) > lgMaxTables {
		return 0, 0, nil, fmt.Errorf("%w: %d tables", errNotPushable, len(plan))
	}
	files := b.files[:len(plan)]
	defer clear(files) // the pool holds no files
	for i, p := range plan {
		f, ok := p.h.reader().f.(*offloadfs.File)
		if !ok {
			return 0, 0, nil, fmt.Errorf("%w: table %s is not an offloadfs file", errNotPushable, p.h.reader().name)
		}
		files[i] = f
	}
	scratch, start, err := ps.requestInto(b.scratch[:0], plan, key, snap, fromIndex)
	if err != nil {
		return 0, 0, nil, err
	}
	ps.pushed.Add(1)
	res, err := ps.p.PushdownInto(ctx, ps.fn, files, start, scratch, b.out[:0])
	if err != nil {
		return 0, 0, nil, err
	}
	if res.TargetMicros == 0 {
		ps.hostRuns.Add(1)
	}
	return ps.decode(res.Output, plan)
}

// request encodes lsm_get's scratch for plan (file i of the request is
// plan table i) and returns it with the request's first read.
func (ps *pushState) request(plan []planTable, key []byte, snap SeqNum, fromIndex bool) ([]byte, host.Start, error) {
	return ps.requestInto(nil, plan, key, snap, fromIndex)
}

// requestInto is request encoding into buf's array when it fits.
func (ps *pushState) requestInto(buf []byte, plan []planTable, key []byte, snap SeqNum, fromIndex bool) ([]byte, host.Start, error) {
	if len(key) == 0 || len(key) > lgMaxKey {
		return nil, host.Start{}, fmt.Errorf("%w: %d-byte key", errNotPushable, len(key))
	}
	if len(plan) == 0 || len(plan) > lgMaxTables {
		return nil, host.Start{}, fmt.Errorf("%w: %d tables", errNotPushable, len(plan))
	}
	scratch := slices.Grow(buf[:0], lgOffKey+len(key))[:lgOffKey+len(key)]
	clear(scratch) // fields not set are zero
	le := binary.LittleEndian
	le.PutUint32(scratch[0:], lgMagic)
	le.PutUint64(scratch[8:], snap)
	le.PutUint32(scratch[16:], uint32(len(key)))
	le.PutUint32(scratch[20:], uint32(len(plan)))
	le.PutUint32(scratch[60:], ps.valueCap)
	for i, p := range plan {
		e := scratch[lgOffPlan+16*i:]
		bh, kind := p.data, uint16(lgPlanData)
		if fromIndex {
			bh, kind = p.top, lgPlanIndex
		}
		le.PutUint64(e, bh.offset)
		le.PutUint32(e[8:], bh.length)
		le.PutUint16(e[12:], uint16(i))
		le.PutUint16(e[14:], kind)
	}
	if fromIndex {
		le.PutUint32(scratch[28:], lgStateTop)
	}
	copy(scratch[lgOffKey:], key)
	first := scratch[lgOffPlan:]
	return scratch, host.Start{File: 0, Offset: le.Uint64(first), Length: le.Uint32(first[8:])}, nil
}

// decode reads lsm_get's final scratch, which comes from the target:
// every field is checked before it is used.
func (ps *pushState) decode(out []byte, plan []planTable) (status uint32, at int, val []byte, err error) {
	if len(out) < lgOffValue {
		return 0, 0, nil, fmt.Errorf("lsm: lsm_get returned %d bytes", len(out))
	}
	le := binary.LittleEndian
	status = le.Uint32(out[4:])
	cur := int(le.Uint32(out[24:]))
	ps.blocks.Add(uint64(le.Uint32(out[44:])))
	ps.tables.Add(uint64(min(cur+1, len(plan))))
	if status == lgAbsent {
		return status, 0, nil, nil
	}
	if cur >= len(plan) {
		return 0, 0, nil, fmt.Errorf("lsm: lsm_get settled at plan entry %d of %d", cur, len(plan))
	}
	tr := le.Uint64(out[32:])
	seq, kind := SeqNum(tr>>8), Kind(tr&0xff)
	tomb := plan[cur].tomb
	switch status {
	case lgSet, lgDel:
		if (status == lgSet) != (kind == KindSet) || (status == lgDel && kind != KindDelete) {
			return 0, 0, nil, fmt.Errorf("lsm: lsm_get status %d with entry kind %d", status, kind)
		}
		n := le.Uint32(out[40:])
		if status == lgDel {
			n = 0
		}
		if n > ps.valueCap || uint64(n) > uint64(len(out)-lgOffValue) {
			return 0, 0, nil, fmt.Errorf("lsm: lsm_get returned a %d-byte value inline in %d bytes", n, len(out))
		}
		if kind != KindSet || tomb > seq {
			return status, cur, nil, nil
		}
		return status, cur, out[lgOffValue : lgOffValue+int(n) : lgOffValue+int(n)], nil
	case lgSetBlock:
		return status, cur, nil, nil
	}
	return 0, 0, nil, fmt.Errorf("lsm: lsm_get finished with status %d", status)
}

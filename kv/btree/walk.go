package btree

import (
	"context"
	"errors"
	"fmt"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/sandbox"
)

// Every operation is a btree_lookup request (functions/README.md) in a
// scratch buffer, stepped by functions.BTreeStep — the Go reference of the
// function the target runs — over nodes from the client cache, from plain
// reads, or handed whole to the target as one pushdown. Plain and pushdown
// therefore share one definition of a lookup, byte for byte, and a
// pushdown can start wherever the host's walk has got to.

// op is one operation's buffers, pooled per store.
type op struct {
	s       *Store
	mode    Mode
	scratch []byte
	buf     []byte // a node or a value read plainly
	last    []byte // the data of the last step: a range's current leaf
	// stopAtValue ends a get when it is about to read the value: an
	// update needs only the value's offset.
	stopAtValue bool
}

func (s *Store) newOp() *op {
	return &op{
		s:       s,
		scratch: make([]byte, scratchSize),
		buf:     make([]byte, max(NodeSize, s.geo.valueSize)),
	}
}

func (s *Store) getOp(mode Mode) (*op, error) {
	if mode != Plain && mode != Pushdown {
		return nil, fmt.Errorf("btree: unknown mode %v", mode)
	}
	if mode == Pushdown && s.pusher == nil {
		return nil, ErrNoPushdown
	}
	o := s.ops.Get().(*op)
	o.mode, o.last, o.stopAtValue = mode, nil, false
	return o, nil
}

func (s *Store) putOp(o *op) { s.ops.Put(o) }

// rootRead is the first read of every request.
func rootRead() sandbox.Next {
	return sandbox.Next{File: functions.IndexFile, Offset: 0, Len: NodeSize}
}

// walk runs the request in o.scratch to its end: first a step with data,
// if given (a plain range resuming in the leaf it stopped in), then from
// the read next on.
func (o *op) walk(ctx context.Context, next sandbox.Next, data []byte) error {
	s := o.s
	for steps := int64(0); ; steps++ {
		if steps > s.geo.maxWalkSteps() {
			return fmt.Errorf("%w: a request took more than %d steps", ErrCorrupt, s.geo.maxWalkSteps())
		}
		if data == nil {
			if o.stopAtValue && next.File == functions.ValueFile {
				return nil
			}
			var err error
			if data, err = o.fetch(ctx, next); err != nil {
				return err
			}
			if data == nil { // the target ran the rest
				return nil
			}
		}
		o.last = data
		done, nx, err := functions.BTreeStep(o.scratch, data)
		if err != nil {
			return fmt.Errorf("%w: at file %d offset %d: %w", ErrCorrupt, next.File, next.Offset, err)
		}
		if done {
			return nil
		}
		if len(nx) != 1 || nx[0].Len > uint64(len(o.buf)) {
			return fmt.Errorf("%w: btree_lookup asked for %v", ErrCorrupt, nx)
		}
		next, data = nx[0], nil
	}
}

// fetch returns the data of the read next: from the cache, from a plain
// read or — in pushdown mode, for an index node — nil after the target
// has run the rest of the request into o.scratch.
func (o *op) fetch(ctx context.Context, next sandbox.Next) ([]byte, error) {
	s := o.s
	if next.File == functions.IndexFile && next.Offset+next.Len <= uint64(len(s.cache)) {
		s.stats.cacheHs.Add(1)
		return s.cache[next.Offset : next.Offset+next.Len], nil
	}
	if o.mode == Pushdown && next.File == functions.IndexFile {
		err := o.push(ctx, next)
		if err == nil {
			return nil, nil
		}
		if !errors.Is(err, ErrPushdownUnavailable) {
			return nil, err
		}
		// The target cannot run it: read plainly from here on. The
		// request's scratch is untouched, so the walk continues as if it
		// had been plain all along.
		s.stats.fallbacks.Add(1)
		s.log.Debug("btree: pushdown unavailable, reading plainly", "dir", s.dir, "err", err)
		o.mode = Plain
	}
	f := s.files[next.File]
	data := o.buf[:next.Len]
	s.stats.reads.Add(1)
	if _, err := f.ReadAt(data, int64(next.Offset)); err != nil {
		return nil, fmt.Errorf("btree: reading %d bytes at %d of %s: %w", next.Len, next.Offset, f.Name(), err)
	}
	return data, nil
}

// push sends the request in o.scratch to the target, starting with the
// read next, and takes the final scratch back. Only the request's header
// travels: the target zeroes the rest, and a request is pushed before it
// has produced any result. If the target has lost btree_lookup (it
// restarted, say), push loads it again and retries once.
func (o *op) push(ctx context.Context, next sandbox.Next) error {
	s := o.s
	start := host.Start{File: next.File, Offset: next.Offset, Length: uint32(next.Len)}
	fn := s.fn.Load()
	for attempt := 0; ; attempt++ {
		s.stats.pushdowns.Add(1)
		res, err := s.pusher.Pushdown(ctx, *fn, s.files, start, o.scratch[:functions.BTreeResultOff])
		switch {
		case err == nil:
			if !res.Done || len(res.Output) < scratchSize {
				return fmt.Errorf("btree: pushdown finished without a result (done %v, %d bytes)", res.Done, len(res.Output))
			}
			copy(o.scratch, res.Output)
			return nil
		case errors.Is(err, ErrPushdownUnavailable):
			return err
		case errors.Is(err, &nvme.StatusError{Status: nvme.StatusStepLimit}),
			errors.Is(err, &nvme.StatusError{Status: nvme.StatusFunctionTimeout}):
			// The target caps steps lower than PushdownSteps says, or
			// it is too busy to finish a step within its time limit:
			// this request does not fit, the next may.
			return fmt.Errorf("%w: %w", ErrPushdownUnavailable, err)
		case attempt == 0 && errors.Is(err, &nvme.StatusError{Status: nvme.StatusFunctionNotFound}):
			id, lerr := s.loadFunction(ctx, fn)
			if lerr != nil {
				return errors.Join(err, lerr)
			}
			s.stats.reloads.Add(1)
			fn = &id
			continue
		}
		var fe *host.FunctionError
		if errors.As(err, &fe) {
			return fmt.Errorf("%w: btree_lookup failed at the target: %w", ErrCorrupt, err)
		}
		return fmt.Errorf("btree: pushdown: %w", err)
	}
}

// Get returns key's value, or ErrNotFound.
func (s *Store) Get(ctx context.Context, mode Mode, key uint64) ([]byte, error) {
	s.stats.gets.Add(1)
	r, err := s.get(ctx, mode, key, false)
	if err != nil {
		return nil, err
	}
	return r.Value, nil
}

// get runs a get request and returns its result; with offOnly it stops
// before reading the value (Value is then nil).
func (s *Store) get(ctx context.Context, mode Mode, key uint64, offOnly bool) (functions.BTreeResult, error) {
	if key == KeyNone {
		return functions.BTreeResult{}, ErrNotFound
	}
	o, err := s.getOp(mode)
	if err != nil {
		return functions.BTreeResult{}, err
	}
	defer s.putOp(o)
	o.stopAtValue = offOnly
	functions.BTreeRequest{Mode: functions.BTreeGet, Key: key, ValueSize: uint32(s.geo.valueSize)}.Encode(o.scratch)
	if err := o.walk(ctx, rootRead(), nil); err != nil {
		return functions.BTreeResult{}, err
	}
	r, err := functions.ParseBTreeResult(o.scratch)
	if err != nil {
		return r, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	switch {
	case offOnly && r.Status == functions.BTreePending:
		// Stopped at the value read: the offset is set.
	case r.Status == functions.BTreeNotFound:
		return r, ErrNotFound
	case r.Status != functions.BTreeFound:
		return r, fmt.Errorf("%w: get of %d ended with status %d", ErrCorrupt, key, r.Status)
	}
	if r.ValueOff%uint64(s.geo.valueSize) != 0 || r.ValueOff >= uint64(s.geo.valueLogSize()) {
		return r, fmt.Errorf("%w: key %d's value at %d, outside the value log's slots", ErrCorrupt, key, r.ValueOff)
	}
	return r, nil
}

// Update replaces key's value (ValueSize bytes) in place; a missing key is
// ErrNotFound. mode is how the value's slot is found. The write is not
// durable before Sync; a concurrent read of the key may see the old
// value, the new one or, as on any disk, a mix of the two.
func (s *Store) Update(ctx context.Context, mode Mode, key uint64, value []byte) error {
	s.stats.updates.Add(1)
	if len(value) != s.geo.valueSize {
		return fmt.Errorf("btree: update of %d: %d-byte value, the tree's values are %d bytes", key, len(value), s.geo.valueSize)
	}
	r, err := s.get(ctx, mode, key, true)
	if err != nil {
		return err
	}
	if _, err := s.values.WriteAt(value, int64(r.ValueOff)); err != nil {
		return fmt.Errorf("btree: update of %d: %w", key, err)
	}
	return nil
}

// Entry is a key and its value.
type Entry struct {
	Key   uint64
	Value []byte
}

// Range returns the entries with keys in [lo, hi], ascending, at most
// limit of them (limit <= 0: all).
func (s *Store) Range(ctx context.Context, mode Mode, lo, hi uint64, limit int) ([]Entry, error) {
	var out []Entry
	err := s.Scan(ctx, mode, lo, hi, limit, func(key uint64, value []byte) error {
		out = append(out, Entry{key, append([]byte(nil), value...)})
		return nil
	})
	return out, err
}

// Scan calls fn with each key in [lo, hi] and its value, ascending, at
// most limit times (limit <= 0: no limit), and stops at fn's first error,
// which it returns. value is valid only during the call.
//
// The keys come in batches of up to 252, one btree_lookup range request
// each: in pushdown mode one round trip per batch, resuming from the root
// (or the cache) at the batch's next_key; in plain mode the host follows
// the leaf chain itself, one read per leaf. Values are read by the host
// either way, each run of adjacent slots in the value log in one read.
func (s *Store) Scan(ctx context.Context, mode Mode, lo, hi uint64, limit int, fn func(key uint64, value []byte) error) error {
	s.stats.ranges.Add(1)
	o, err := s.getOp(mode)
	if err != nil {
		return err
	}
	defer s.putOp(o)
	if hi == KeyNone {
		hi-- // KeyNone is never stored; it marks unused slots
	}
	if lo > hi {
		return nil
	}
	vals := &valueReader{s: s}
	left := limit
	key := lo
	var resume []byte // plain: the leaf the last batch stopped in
	for {
		batch := functions.BTreeRangeMax
		if o.mode == Pushdown {
			batch = s.geo.rangeMax(s.cached, s.steps)
			if batch == 0 {
				// No batch fits the target's step cap: too deep a tree
				// for too small a fanout.
				s.stats.fallbacks.Add(1)
				o.mode = Plain
				batch = functions.BTreeRangeMax
			}
		}
		if limit > 0 {
			batch = min(batch, left)
		}
		functions.BTreeRequest{Mode: functions.BTreeRange, Key: key, Hi: hi, Max: uint32(batch)}.Encode(o.scratch)
		if resume != nil {
			err = o.walk(ctx, sandbox.Next{}, resume)
		} else {
			err = o.walk(ctx, rootRead(), nil)
		}
		if err != nil {
			return err
		}
		r, err := functions.ParseBTreeResult(o.scratch)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		if err := vals.emit(r.Entries, key, hi, fn); err != nil {
			return err
		}
		left -= len(r.Entries)
		switch {
		case r.Status == functions.BTreeFound:
			return nil
		case r.Status != functions.BTreeMore:
			return fmt.Errorf("%w: range [%d, %d] ended with status %d", ErrCorrupt, key, hi, r.Status)
		case r.NextKey <= key || r.NextKey > hi:
			return fmt.Errorf("%w: range [%d, %d] resumes at %d", ErrCorrupt, key, hi, r.NextKey)
		case limit > 0 && left <= 0:
			return nil
		}
		key = r.NextKey
		resume = nil
		if o.mode == Plain {
			// The next batch starts in the leaf this one stopped in:
			// step it again rather than descend again. It may be the
			// cache's or o.buf, which the next read overwrites only
			// after this step.
			resume = o.last
		}
	}
}

// valueReader reads the values of a batch of range entries.
type valueReader struct {
	s   *Store
	buf []byte
}

// maxValueRun bounds one read of adjacent values.
const maxValueRun = 128 << 10

// emit checks a batch's entries (ascending, within [lo, hi], in the value
// log's slots) and calls fn with each and its value, reading each run of
// adjacent value slots at once.
func (v *valueReader) emit(es []functions.BTreeEntry, lo, hi uint64, fn func(uint64, []byte) error) error {
	s := v.s
	vs := uint64(s.geo.valueSize)
	end := uint64(s.geo.valueLogSize())
	for i := range es {
		e := es[i]
		if e.Key < lo || e.Key > hi || (i > 0 && e.Key <= es[i-1].Key) {
			return fmt.Errorf("%w: range [%d, %d] returned key %d out of order", ErrCorrupt, lo, hi, e.Key)
		}
		if e.ValueOff%vs != 0 || e.ValueOff >= end {
			return fmt.Errorf("%w: key %d's value at %d, outside the value log's slots", ErrCorrupt, e.Key, e.ValueOff)
		}
	}
	for i := 0; i < len(es); {
		j := i + 1
		for j < len(es) && es[j].ValueOff == es[j-1].ValueOff+vs && uint64(j-i+1)*vs <= maxValueRun {
			j++
		}
		n := int(uint64(j-i) * vs)
		if cap(v.buf) < n {
			v.buf = make([]byte, n)
		}
		b := v.buf[:n]
		s.stats.reads.Add(1)
		if _, err := s.values.ReadAt(b, int64(es[i].ValueOff)); err != nil {
			return fmt.Errorf("btree: reading values at %d: %w", es[i].ValueOff, err)
		}
		for k := i; k < j; k++ {
			if err := fn(es[k].Key, b[uint64(k-i)*vs:uint64(k-i+1)*vs]); err != nil {
				return err
			}
		}
		i = j
	}
	return nil
}

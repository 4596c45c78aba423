package functions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// BPF-KV's on-disk B+-tree (include/bpfkv.h; functions/README.md).
const (
	NodeSize = 512 // bytes per node
	Fanout   = 31  // keys (and pointers) per node
	// NodeInner and NodeLeaf are a node's type.
	NodeInner = 0
	NodeLeaf  = 1
	// KeyNone marks an unused slot; it cannot be stored as a key.
	KeyNone = ^uint64(0)
	// PtrMask clears bit 63 of a pointer (BPF-KV's FILE_MASK), which
	// readers ignore.
	PtrMask = 1<<63 - 1
	// IndexFile and ValueFile are the tree's files in a request's file
	// table.
	IndexFile = 0
	ValueFile = 1
	// DefaultValueSize is BPF-KV's value size.
	DefaultValueSize = 64
)

// Node is one 512-byte node: {u64 next; u64 type; u64 key[31]; u64
// ptr[31]}, little-endian. Next is a leaf's next leaf (0: the last). Inner:
// Ptr[i] is the child holding keys from Key[i] up to Key[i+1]. Leaf: Ptr[i]
// is Key[i]'s value offset in the value log. Unused slots hold KeyNone and
// pointer 0.
type Node struct {
	Next uint64
	Type uint64
	Key  [Fanout]uint64
	Ptr  [Fanout]uint64
}

// AppendBinary appends the node's 512-byte encoding.
func (n *Node) AppendBinary(b []byte) ([]byte, error) {
	b = le.AppendUint64(b, n.Next)
	b = le.AppendUint64(b, n.Type)
	for _, k := range n.Key {
		b = le.AppendUint64(b, k)
	}
	for _, p := range n.Ptr {
		b = le.AppendUint64(b, p)
	}
	return b, nil
}

// ParseNode decodes the node at the start of b.
func ParseNode(b []byte) (Node, error) {
	var n Node
	if len(b) < NodeSize {
		return n, fmt.Errorf("functions: node needs %d bytes, have %d", NodeSize, len(b))
	}
	n.Next = le.Uint64(b)
	n.Type = le.Uint64(b[8:])
	for i := range Fanout {
		n.Key[i] = le.Uint64(b[16+8*i:])
		n.Ptr[i] = le.Uint64(b[16+8*Fanout+8*i:])
	}
	return n, nil
}

// child is BPF-KV's nxt_node: the pointer of the last used i with Key[i]
// <= key.
func (n *Node) child(key uint64) uint64 {
	i := 1
	for ; i < Fanout; i++ {
		if key < n.Key[i] || n.Key[i] == KeyNone {
			break
		}
	}
	return n.Ptr[i-1] & PtrMask
}

// BTreeValue is the value BuildBTree stores for key: size bytes, the key's
// little-endian bytes, then 0x00, 0x01, ... each XORed with the key's low
// byte.
func BTreeValue(key uint64, size int) []byte {
	v := make([]byte, size)
	var kb [8]byte
	le.PutUint64(kb[:], key)
	for i := range v {
		if i < 8 {
			v[i] = kb[i]
		} else {
			v[i] = byte(i) ^ byte(key)
		}
	}
	return v
}

// BuildBTree builds a B+-tree of full (31-key) nodes over keys; see
// BuildBTreeFanout.
func BuildBTree(keys []uint64, valueSize int) (index, values []byte) {
	return BuildBTreeFanout(keys, valueSize, Fanout)
}

// BuildBTreeFanout builds the index file and value log of a B+-tree over
// keys (any order; duplicates are stored once) whose nodes hold at most
// fanout (2..31) keys, so tests can build deep trees from few keys. The
// root is at offset 0, then every level top-down, each in key order; the
// leaves are chained by Next. The value of the i-th smallest key,
// BTreeValue(key, valueSize), is at offset i*valueSize of the value log.
// An empty key set gives one empty leaf. It panics on KeyNone, on a
// valueSize below 1 and on a fanout outside 2..31.
func BuildBTreeFanout(keys []uint64, valueSize, fanout int) (index, values []byte) {
	if valueSize < 1 || fanout < 2 || fanout > Fanout {
		panic(fmt.Sprintf("functions: BuildBTree: bad valueSize %d or fanout %d", valueSize, fanout))
	}
	ks := slices.Clone(keys)
	slices.Sort(ks)
	ks = slices.Compact(ks)
	if len(ks) > 0 && ks[len(ks)-1] == KeyNone {
		panic("functions: BuildBTree: KeyNone cannot be stored")
	}
	values = make([]byte, 0, len(ks)*valueSize)
	for _, k := range ks {
		values = append(values, BTreeValue(k, valueSize)...)
	}

	// Levels bottom-up; each node's pointers are filled once offsets are
	// known. A node is described by its first key and its entries.
	type entry struct{ key, ptr uint64 }
	var levels [][][]entry
	var leaves [][]entry
	for i := 0; i < len(ks); i += fanout {
		var es []entry
		for j := i; j < min(i+fanout, len(ks)); j++ {
			es = append(es, entry{ks[j], uint64(j * valueSize)})
		}
		leaves = append(leaves, es)
	}
	if len(leaves) == 0 {
		leaves = append(leaves, nil)
	}
	levels = append(levels, leaves)
	for len(levels[len(levels)-1]) > 1 {
		below := levels[len(levels)-1]
		var level [][]entry
		for i := 0; i < len(below); i += fanout {
			var es []entry
			for j := i; j < min(i+fanout, len(below)); j++ {
				es = append(es, entry{below[j][0].key, uint64(j)}) // ptr: index in below, for now
			}
			level = append(level, es)
		}
		levels = append(levels, level)
	}
	// Offsets: top level first.
	first := make([]uint64, len(levels)) // offset of each level's first node
	off := uint64(0)
	for l := len(levels) - 1; l >= 0; l-- {
		first[l] = off
		off += uint64(len(levels[l])) * NodeSize
	}
	index = make([]byte, 0, off)
	for l := len(levels) - 1; l >= 0; l-- {
		for i, es := range levels[l] {
			n := Node{Type: NodeInner}
			if l == 0 {
				n.Type = NodeLeaf
				if i+1 < len(levels[0]) {
					n.Next = first[0] + uint64(i+1)*NodeSize
				}
			}
			for s := range Fanout {
				n.Key[s] = KeyNone
				if s < len(es) {
					n.Key[s] = es[s].key
					n.Ptr[s] = es[s].ptr
					if l > 0 {
						n.Ptr[s] = first[l-1] + es[s].ptr*NodeSize
					}
				}
			}
			index, _ = n.AppendBinary(index)
		}
	}
	return index, values
}

// BTree request modes and statuses (struct bpfkv_req).
const (
	BTreeGet   = 0
	BTreeRange = 1

	BTreePending  = 0
	BTreeFound    = 1 // get: the value is in the result; range: complete
	BTreeNotFound = 2 // get: no such key
	BTreeMore     = 3 // range: stopped at Max; resume from NextKey

	btreeStateNode  = 0
	btreeStateValue = 1
	btreeStateScan  = 2

	// BTreeResultOff is where the result starts in scratch;
	// BTreeMaxValue is the largest value a get can return and
	// BTreeRangeMax the most entries a range scan returns per request.
	BTreeResultOff = 64
	BTreeMaxValue  = sandbox.ScratchSize - BTreeResultOff
	BTreeRangeMax  = BTreeMaxValue / 16
)

// BTreeRequest is what a host writes into scratch before the first step.
type BTreeRequest struct {
	Mode      uint32 // BTreeGet or BTreeRange
	Key       uint64 // get: the key; range: the low key (inclusive)
	Hi        uint64 // range: the high key (inclusive)
	ValueSize uint32 // get: the value's size (1..BTreeMaxValue)
	Max       uint32 // range: most entries (0 or over BTreeRangeMax: BTreeRangeMax)
}

// Encode zeroes scratch and writes the request at its start.
func (r BTreeRequest) Encode(scratch []byte) {
	clear(scratch[:sandbox.ScratchSize])
	le.PutUint64(scratch[0:], r.Key)
	le.PutUint64(scratch[8:], r.Hi)
	le.PutUint32(scratch[16:], r.Mode)
	le.PutUint32(scratch[20:], r.ValueSize)
	le.PutUint32(scratch[24:], r.Max)
}

// BTreeEntry is one range-scan result.
type BTreeEntry struct {
	Key      uint64
	ValueOff uint64 // in the value log
}

// BTreeResult is a finished request's scratch, decoded.
type BTreeResult struct {
	Status   uint32
	Nodes    uint32       // nodes read
	ValueOff uint64       // get: the value's offset in the value log
	Value    []byte       // get, BTreeFound: the value
	Entries  []BTreeEntry // range
	NextKey  uint64       // range, BTreeMore: the first key not returned
}

// ParseBTreeResult decodes scratch after a request; valueSize is the get's
// value size.
func ParseBTreeResult(scratch []byte) (BTreeResult, error) {
	if len(scratch) < sandbox.ScratchSize {
		return BTreeResult{}, fmt.Errorf("functions: scratch is %d bytes", len(scratch))
	}
	r := BTreeResult{
		Status:   le.Uint32(scratch[32:]),
		Nodes:    le.Uint32(scratch[36:]),
		ValueOff: le.Uint64(scratch[40:]),
		NextKey:  le.Uint64(scratch[56:]),
	}
	switch le.Uint32(scratch[16:]) {
	case BTreeGet:
		if r.Status == BTreeFound {
			vs := le.Uint32(scratch[20:])
			if vs > BTreeMaxValue {
				return r, fmt.Errorf("functions: value size %d", vs)
			}
			r.Value = append([]byte(nil), scratch[BTreeResultOff:BTreeResultOff+vs]...)
		}
	case BTreeRange:
		n := le.Uint32(scratch[48:])
		if n > BTreeRangeMax {
			return r, fmt.Errorf("functions: %d range entries", n)
		}
		for i := range n {
			e := scratch[BTreeResultOff+16*i:]
			r.Entries = append(r.Entries, BTreeEntry{le.Uint64(e), le.Uint64(e[8:])})
		}
	}
	return r, nil
}

// BTreeStep is btree_lookup's pushdown entry in Go: one step of a request
// whose state is scratch (at least sandbox.ScratchSize bytes), with data
// the block(s) just read. It returns done, or the one read it asks for
// next; errors are *sandbox.FunctionError, as from the runtimes.
func BTreeStep(scratch, data []byte) (done bool, next []sandbox.Next, err error) {
	key := le.Uint64(scratch[0:])
	hi := le.Uint64(scratch[8:])
	mode := le.Uint32(scratch[16:])
	valueSize := le.Uint32(scratch[20:])
	state := le.Uint32(scratch[28:])
	setStatus := func(s uint32) { le.PutUint32(scratch[32:], s) }
	countNode := func() { le.PutUint32(scratch[36:], le.Uint32(scratch[36:])+1) }
	ask := func(file uint32, off, n uint64) (bool, []sandbox.Next, error) {
		return false, []sandbox.Next{{File: file, Offset: off, Len: n}}, nil
	}
	einval := fnErr(EINVAL)

	if mode == BTreeGet {
		if valueSize == 0 || valueSize > BTreeMaxValue {
			return false, nil, einval
		}
		if state == btreeStateValue {
			if len(data) < int(valueSize) {
				return false, nil, einval
			}
			copy(scratch[BTreeResultOff:], data[:valueSize])
			setStatus(BTreeFound)
			return true, nil, nil
		}
		if state != btreeStateNode || len(data) < NodeSize {
			return false, nil, einval
		}
		countNode()
		n, _ := ParseNode(data)
		if n.Type == NodeInner {
			c := n.child(key)
			if c == 0 {
				return false, nil, einval
			}
			return ask(IndexFile, c, NodeSize)
		}
		if n.Type != NodeLeaf {
			return false, nil, einval
		}
		for i, k := range n.Key {
			if k == key && k != KeyNone {
				off := n.Ptr[i] & PtrMask
				le.PutUint64(scratch[40:], off)
				le.PutUint32(scratch[28:], btreeStateValue)
				return ask(ValueFile, off, uint64(valueSize))
			}
			if k > key {
				break
			}
		}
		setStatus(BTreeNotFound)
		return true, nil, nil
	}

	if mode != BTreeRange || len(data) < NodeSize {
		return false, nil, einval
	}
	countNode()
	n, _ := ParseNode(data)
	if state == btreeStateNode && n.Type == NodeInner {
		if hi < key {
			setStatus(BTreeFound)
			return true, nil, nil
		}
		c := n.child(key)
		if c == 0 {
			return false, nil, einval
		}
		return ask(IndexFile, c, NodeSize)
	}
	if (state != btreeStateNode && state != btreeStateScan) || n.Type != NodeLeaf {
		return false, nil, einval
	}
	maxN := le.Uint32(scratch[24:])
	if maxN == 0 || maxN > BTreeRangeMax {
		maxN = BTreeRangeMax
	}
	count := le.Uint32(scratch[48:])
	for i, k := range n.Key {
		if k == KeyNone {
			break
		}
		if k < key {
			continue
		}
		if k > hi {
			setStatus(BTreeFound)
			return true, nil, nil
		}
		if count >= maxN {
			setStatus(BTreeMore)
			le.PutUint64(scratch[56:], k)
			return true, nil, nil
		}
		e := scratch[BTreeResultOff+16*count:]
		le.PutUint64(e, k)
		le.PutUint64(e[8:], n.Ptr[i]&PtrMask)
		count++
		le.PutUint32(scratch[48:], count)
	}
	if n.Next == 0 {
		setStatus(BTreeFound)
		return true, nil, nil
	}
	le.PutUint32(scratch[28:], btreeStateScan)
	return ask(IndexFile, n.Next&PtrMask, NodeSize)
}

// StepFunc is one pushdown step over a request's scratch; BTreeStep is one.
type StepFunc func(scratch, data []byte) (done bool, next []sandbox.Next, err error)

// RunPushdown runs a pushdown request over in-memory files through the
// executor (pushdown.Executor.RunSteps), with step as the function: it
// reads first, calls step, and reads what each step asks for, within lim's
// MaxSteps and MaxStepBytes and the files' ends, exactly as a target runs
// a sandboxed module. scratch (at least sandbox.ScratchSize bytes) is the
// request's scratch, updated in place. It returns the number of steps run.
func RunPushdown(step StepFunc, scratch []byte, files [][]byte, first sandbox.Next, lim sandbox.Limits) (int, error) {
	if len(scratch) < sandbox.ScratchSize {
		return 0, fmt.Errorf("functions: scratch is %d bytes, want %d", len(scratch), sandbox.ScratchSize)
	}
	dev, table, err := memDevice(files)
	if err != nil {
		return 0, err
	}
	if uint64(uint32(first.Len)) != first.Len {
		return 0, fmt.Errorf("functions: a start read of %d bytes", first.Len)
	}
	e := pushdown.Executor{Limits: lim}
	req := &pushdown.Request{Files: table, StartFile: first.File, StartOffset: first.Offset, StartLength: uint32(first.Len)}
	res, err := e.RunSteps(context.Background(), dev, &nativeStepper{step: step, scratch: scratch[:sandbox.ScratchSize]}, req)
	return int(res.Steps), err
}

// nativeStepper runs a StepFunc as the executor's function.
type nativeStepper struct {
	step    StepFunc
	scratch []byte
	data    []byte
}

func (s *nativeStepper) Scratch() []byte { return s.scratch }

// ResultLen is the whole scratch: a StepFunc has no way to ask for less.
func (s *nativeStepper) ResultLen() int { return len(s.scratch) }

func (s *nativeStepper) Data(n int) ([]byte, error) {
	if cap(s.data) < n {
		s.data = make([]byte, n)
	}
	s.data = s.data[:n]
	return s.data, nil
}

func (s *nativeStepper) Step(_ context.Context, _ uint32, _ uint64, n int) (bool, []sandbox.Next, error) {
	return s.step(s.scratch, s.data[:n])
}

// memBlock is the block size of memDevice's device.
const memBlock = 512

// memDevice lays files out one after another on a read-only in-memory
// device, each from a block boundary, and returns the device and the
// request's file table over it.
func memDevice(files [][]byte) (*memFiles, []pushdown.File, error) {
	d := &memFiles{files: files}
	table := make([]pushdown.File, len(files))
	for i, f := range files {
		blocks := (uint64(len(f)) + memBlock - 1) / memBlock
		if blocks > 1<<32-1 {
			return nil, nil, fmt.Errorf("functions: file %d is %d bytes", i, len(f))
		}
		d.base = append(d.base, d.size)
		table[i].Size = uint64(len(f))
		if blocks > 0 {
			table[i].Extents = []pushdown.Extent{{LBA: uint64(d.size) / memBlock, Blocks: uint32(blocks)}}
		}
		d.size += int64(blocks) * memBlock
	}
	return d, table, nil
}

// memFiles is memDevice's device: file i's bytes start at base[i], and
// the rest of its last block reads as zeroes.
type memFiles struct {
	files [][]byte
	base  []int64
	size  int64
}

func (d *memFiles) Size() int64    { return d.size }
func (d *memFiles) BlockSize() int { return memBlock }

func (d *memFiles) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("functions: read at %d", off)
	}
	n := 0
	for n < len(p) {
		if off >= d.size {
			return n, io.EOF
		}
		// The file whose blocks hold off: the last one starting at or
		// before it (an empty file starts where the next one does).
		i := sort.Search(len(d.base), func(i int) bool { return d.base[i] > off }) - 1
		end := d.size
		if i+1 < len(d.base) {
			end = d.base[i+1]
		}
		k := int(min(int64(len(p)-n), end-off))
		c := 0
		if rel := off - d.base[i]; rel < int64(len(d.files[i])) {
			c = copy(p[n:n+k], d.files[i][rel:])
		}
		clear(p[n+c : n+k])
		n += k
		off += int64(k)
	}
	return n, nil
}

func (d *memFiles) WriteAt([]byte, int64) (int, error) {
	return 0, errors.New("functions: the in-memory files are read-only")
}

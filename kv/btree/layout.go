package btree

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/sandbox"
)

var le = binary.LittleEndian

// Geometry limits. The node format is BPF-KV's, which btree_lookup reads:
// 512-byte nodes of at most 31 keys; a get returns at most
// functions.BTreeMaxValue bytes in the function's scratch.
const (
	NodeSize         = functions.NodeSize
	MaxFanout        = functions.Fanout
	MinFanout        = 2
	DefaultFanout    = functions.Fanout
	DefaultValueSize = functions.DefaultValueSize
	MaxValueSize     = functions.BTreeMaxValue
	// KeyNone is the one key that cannot be stored: unused node slots
	// hold it.
	KeyNone = functions.KeyNone
)

// level is one level of the tree: its node count and the byte offset of
// its first node in the index file.
type level struct {
	nodes int64
	off   int64
}

// geometry is where everything of a tree of keys entries lives. It is a
// pure function of (keys, fanout, valueSize), so the meta file need only
// record those: levels top-down (levels[0] is the root, the last the
// leaves), each stored contiguously in key order, the root at offset 0 as
// btree_lookup requires, and the value of the i-th smallest key at
// i*valueSize of the value log. This is exactly the layout of
// functions.BuildBTreeFanout, which the tests rely on.
type geometry struct {
	keys      int64
	fanout    int
	valueSize int
	levels    []level
}

func newGeometry(keys int64, fanout, valueSize int) (geometry, error) {
	g := geometry{keys: keys, fanout: fanout, valueSize: valueSize}
	if err := checkShape(keys, fanout, valueSize); err != nil {
		return g, err
	}
	// Node counts bottom-up: an empty tree is one empty leaf.
	counts := []int64{max(1, ceilDiv(keys, int64(fanout)))}
	for counts[len(counts)-1] > 1 {
		counts = append(counts, ceilDiv(counts[len(counts)-1], int64(fanout)))
	}
	g.levels = make([]level, len(counts))
	off := int64(0)
	for i := range g.levels {
		n := counts[len(counts)-1-i]
		g.levels[i] = level{nodes: n, off: off}
		off += n * NodeSize
	}
	return g, nil
}

func checkShape(keys int64, fanout, valueSize int) error {
	switch {
	case keys < 0:
		return fmt.Errorf("btree: %d keys", keys)
	case fanout < MinFanout || fanout > MaxFanout:
		return fmt.Errorf("btree: fanout %d: want %d to %d keys per node", fanout, MinFanout, MaxFanout)
	case valueSize < 1 || valueSize > MaxValueSize:
		return fmt.Errorf("btree: value size %d: want 1 to %d bytes", valueSize, MaxValueSize)
	case keys > (1<<62)/int64(valueSize):
		return fmt.Errorf("btree: %d keys of %d-byte values do not fit a value log", keys, valueSize)
	}
	return nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// depth is the number of levels, leaves included.
func (g geometry) depth() int { return len(g.levels) }

// leaves returns the leaf level.
func (g geometry) leaves() level { return g.levels[len(g.levels)-1] }

// indexSize is the index file's size in bytes.
func (g geometry) indexSize() int64 {
	l := g.leaves()
	return l.off + l.nodes*NodeSize
}

// valueLogSize is the value log's size in bytes.
func (g geometry) valueLogSize() int64 { return g.keys * int64(g.valueSize) }

// cacheEnd is the end of the index file's prefix holding the top k levels.
func (g geometry) cacheEnd(k int) int64 {
	if k >= g.depth() {
		return g.indexSize()
	}
	if k <= 0 {
		return 0
	}
	return g.levels[k].off
}

// maxWalkSteps bounds the steps of any request on this tree: a descent
// plus every leaf, and the value. A walk that takes more is going round a
// cycle in a corrupt index.
func (g geometry) maxWalkSteps() int64 { return int64(g.depth()) + g.leaves().nodes + 2 }

// rangeMax is the most entries one pushed-down range request may ask for
// so that it finishes within steps target steps when it starts at level
// from: the descent to the leaves takes depth-1-from steps, and max
// entries span at most ceil(max/fanout)+2 leaves (the first may hold none
// of them, and finding out that there are more takes one leaf past the
// last). 0 means no range request fits.
func (g geometry) rangeMax(from, steps int) int {
	leaves := steps - (g.depth() - 1 - from)
	if leaves < 3 {
		return 0
	}
	return min(functions.BTreeRangeMax, (leaves-2)*g.fanout)
}

// The meta file records a tree's shape (see geometry): 64 bytes,
// little-endian.
//
//	bytes  0-7  magic "BPFKVnsT"
//	bytes  8-11 format (1)
//	bytes 12-15 fanout
//	bytes 16-19 value size
//	bytes 20-23 node size (512)
//	bytes 24-31 keys
//	bytes 32-35 depth (levels, leaves included)
//	bytes 36-39 reserved (0)
//	bytes 40-47 index file size
//	bytes 48-55 value log size
//	bytes 56-59 CRC-32C of bytes 0-55
//	bytes 60-63 reserved (0)
const (
	metaSize   = 64
	metaMagic  = "BPFKVnsT"
	metaFormat = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (g geometry) encodeMeta() []byte {
	b := make([]byte, metaSize)
	copy(b, metaMagic)
	le.PutUint32(b[8:], metaFormat)
	le.PutUint32(b[12:], uint32(g.fanout))
	le.PutUint32(b[16:], uint32(g.valueSize))
	le.PutUint32(b[20:], NodeSize)
	le.PutUint64(b[24:], uint64(g.keys))
	le.PutUint32(b[32:], uint32(g.depth()))
	le.PutUint64(b[40:], uint64(g.indexSize()))
	le.PutUint64(b[48:], uint64(g.valueLogSize()))
	le.PutUint32(b[56:], crc32.Checksum(b[:56], castagnoli))
	return b
}

func decodeMeta(b []byte) (geometry, error) {
	bad := func(format string, args ...any) (geometry, error) {
		return geometry{}, fmt.Errorf("%w: meta: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	if len(b) != metaSize {
		return bad("%d bytes, want %d", len(b), metaSize)
	}
	if string(b[:8]) != metaMagic {
		return bad("bad magic %q", b[:8])
	}
	if got, want := le.Uint32(b[56:]), crc32.Checksum(b[:56], castagnoli); got != want {
		return bad("checksum %08x, want %08x", got, want)
	}
	if le.Uint32(b[36:]) != 0 || le.Uint32(b[60:]) != 0 {
		return bad("reserved bytes set")
	}
	if f := le.Uint32(b[8:]); f != metaFormat {
		return bad("format %d, this build reads %d", f, metaFormat)
	}
	if ns := le.Uint32(b[20:]); ns != NodeSize {
		return bad("node size %d, want %d", ns, NodeSize)
	}
	keys := le.Uint64(b[24:])
	if keys > 1<<62 {
		return bad("%d keys", keys)
	}
	g, err := newGeometry(int64(keys), int(le.Uint32(b[12:])), int(le.Uint32(b[16:])))
	if err != nil {
		return bad("%v", err)
	}
	if d := le.Uint32(b[32:]); int(d) != g.depth() {
		return bad("depth %d, but %d keys of fanout %d make %d levels", d, keys, g.fanout, g.depth())
	}
	if s := le.Uint64(b[40:]); int64(s) != g.indexSize() {
		return bad("index size %d, want %d", s, g.indexSize())
	}
	if s := le.Uint64(b[48:]); int64(s) != g.valueLogSize() {
		return bad("value log size %d, want %d", s, g.valueLogSize())
	}
	return g, nil
}

// scratchSize is btree_lookup's scratch; a request header is its first
// functions.BTreeResultOff bytes.
const scratchSize = sandbox.ScratchSize

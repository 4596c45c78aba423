package btree

import (
	"context"
	"fmt"

	"github.com/nearstore/nearstore/functions"
)

// Source yields the entries of a bulk load in strictly ascending key
// order: Source(i, value) returns the i-th key and writes its value into
// value (ValueSize bytes).
type Source func(i int64, value []byte) (key uint64, err error)

// loadChunk is how many bytes the loader gathers per write: large enough
// that a write is a few full-size NVMe commands, small enough to report
// progress often.
const loadChunk = 1 << 20

// chunkWriter writes a file sequentially from off in loadChunk pieces.
type chunkWriter struct {
	w   writerAt
	off int64
	buf []byte
}

type writerAt interface {
	WriteAt(p []byte, off int64) (int, error)
}

func (c *chunkWriter) flushIfFull() error {
	if len(c.buf) < loadChunk {
		return nil
	}
	return c.flush()
}

func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	if _, err := c.w.WriteAt(c.buf, c.off); err != nil {
		return err
	}
	c.off += int64(len(c.buf))
	c.buf = c.buf[:0]
	return nil
}

// bulkLoad writes the tree of g's keys, drawn from src, into index and
// values, both already sized: the values and the leaves in one pass as
// the keys stream in, then the inner levels bottom-up from the first keys
// of the level below (a fanout-th of the nodes each time, so only those
// stay in memory). progress, if set, hears the entries written so far.
func bulkLoad(ctx context.Context, g geometry, index, values writerAt, src Source, progress func(done, total int64)) error {
	vs := g.valueSize
	vw := &chunkWriter{w: values, buf: make([]byte, 0, loadChunk+vs)}
	leaves := g.leaves()
	nw := &chunkWriter{w: index, off: leaves.off, buf: make([]byte, 0, loadChunk+NodeSize)}
	firsts := make([]uint64, 0, leaves.nodes) // each leaf's smallest key
	value := make([]byte, vs)
	leaf := emptyNode(functions.NodeLeaf)
	fill := 0
	var prev uint64
	report := func(done int64) {
		if progress != nil {
			progress(done, g.keys)
		}
	}
	report(0)
	for i := range g.keys {
		clear(value)
		key, err := src(i, value)
		if err != nil {
			return fmt.Errorf("btree: load: entry %d: %w", i, err)
		}
		switch {
		case key == KeyNone:
			return fmt.Errorf("btree: load: entry %d: key %#x is reserved", i, key)
		case i > 0 && key <= prev:
			return fmt.Errorf("btree: load: entry %d: key %d after %d; keys must be strictly ascending", i, key, prev)
		}
		prev = key
		vw.buf = append(vw.buf, value...)
		if fill == 0 {
			firsts = append(firsts, key)
		}
		leaf.Key[fill] = key
		leaf.Ptr[fill] = uint64(i) * uint64(vs)
		fill++
		if fill == g.fanout || i == g.keys-1 {
			if n := int64(len(firsts)); n < leaves.nodes {
				leaf.Next = uint64(leaves.off + n*NodeSize)
			}
			nw.buf, _ = leaf.AppendBinary(nw.buf)
			leaf, fill = emptyNode(functions.NodeLeaf), 0
			if err := nw.flushIfFull(); err != nil {
				return fmt.Errorf("btree: load: writing leaves: %w", err)
			}
		}
		if len(vw.buf) >= loadChunk {
			if err := vw.flush(); err != nil {
				return fmt.Errorf("btree: load: writing values: %w", err)
			}
			report(i + 1)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	if g.keys == 0 {
		nw.buf, _ = leaf.AppendBinary(nw.buf)
		firsts = append(firsts, 0)
	}
	if err := vw.flush(); err != nil {
		return fmt.Errorf("btree: load: writing values: %w", err)
	}
	if err := nw.flush(); err != nil {
		return fmt.Errorf("btree: load: writing leaves: %w", err)
	}
	below := firsts
	for l := g.depth() - 2; l >= 0; l-- {
		child := g.levels[l+1]
		w := &chunkWriter{w: index, off: g.levels[l].off, buf: make([]byte, 0, loadChunk+NodeSize)}
		up := make([]uint64, 0, g.levels[l].nodes)
		for j := 0; j < len(below); j += g.fanout {
			n := emptyNode(functions.NodeInner)
			for s := range min(g.fanout, len(below)-j) {
				n.Key[s] = below[j+s]
				n.Ptr[s] = uint64(child.off + int64(j+s)*NodeSize)
			}
			up = append(up, below[j])
			w.buf, _ = n.AppendBinary(w.buf)
			if err := w.flushIfFull(); err != nil {
				return fmt.Errorf("btree: load: writing level %d: %w", l, err)
			}
		}
		if err := w.flush(); err != nil {
			return fmt.Errorf("btree: load: writing level %d: %w", l, err)
		}
		below = up
	}
	report(g.keys)
	return nil
}

// emptyNode returns a node of type typ with every slot unused.
func emptyNode(typ uint64) functions.Node {
	n := functions.Node{Type: typ}
	for i := range n.Key {
		n.Key[i] = KeyNone
	}
	return n
}

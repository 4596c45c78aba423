package lambdabench

import (
	"bytes"
	"container/heap"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/nearstore/nearstore/functions"
)

// The λ-IO applications (λ-IO, Table 3) as `bench lambda` runs them: how
// each one's dataset is made, how a file is cut into λ requests, what
// parameters a request carries, how the requests' outputs combine into
// the application's answer, and the native reference that answer must
// equal. None of it depends on where the calls run.
//
// Every dataset is a whole number of lambdaBlock-byte blocks, and every
// request covers whole blocks (the last one of a file may be shorter than
// the others, never partial), so a record never straddles two requests:
// u64s, u32s and vectors divide the block, grep's text is laid out in
// lines that end at every block boundary, and bitmap's output blocks are
// the device's.

// lambdaBlock is the unit datasets and requests are made of: 4 KiB, which
// 8-byte and 4-byte integers, KNN's vectors (lambdaKNNDim × 4 bytes) and
// the device's blocks all divide.
const lambdaBlock = 4096

// KNN's shape: lambdaKNNDim-component s32 vectors (64 bytes each, so a
// λ read's output is an eighth of its input) and the lambdaKNNK nearest
// kept.
const (
	lambdaKNNDim = 16
	lambdaKNNK   = 10
	// lambdaKNNRange bounds the components, fixed-point scaled: |x| < 2^15
	// keeps every squared distance far below 2^64.
	lambdaKNNRange = 1 << 15
)

// grep's text: lines of words from lambdaWords; about one line in
// lambdaGrepEvery also holds LambdaGrepPattern, which no word contains
// (and a pattern without spaces cannot match across words).
const (
	// LambdaGrepPattern is what `bench lambda --app grep` looks for.
	LambdaGrepPattern = "zyzzyva"
	lambdaGrepEvery   = 100
)

var lambdaWords = strings.Fields(`storage compute near data host target
	network lambda read write cache page block extent file inode journal
	commit sync flush queue command request response kernel user sandbox
	module function runtime memory volume namespace device controller
	offload pushdown filter projection aggregate scan index tree leaf node
	value key record table column row order part supplier customer region`)

// lambdaApp is one application.
type lambdaApp struct {
	// name is the --app name; function the standard function it calls.
	name, function string
	// write: a λ write (bitmap) rather than a λ read.
	write bool
	// params is what each request prepends to its data.
	params []byte
	// outCap is the output capacity a request of n bytes needs.
	outCap func(n int) int
	// generate makes the dataset: a read app's file; for a write app, the
	// bytes the file must hold after a run.
	generate func(size int64, seed uint64) []byte
	// newCombiner starts combining one run's outputs.
	newCombiner func() lambdaCombiner
	// reference computes the answer natively over the whole file (a read
	// app's file contents).
	reference func(file []byte) (string, error)
}

// lambdaCombiner folds the outputs of one run's requests, in request
// order, into the application's answer.
type lambdaCombiner interface {
	// add takes the output of the request over [off, off+n).
	add(off int64, n int, out []byte) error
	// result is the answer, in the form reference returns.
	result() string
}

// Apps lists the applications `bench lambda` runs.
func Apps() []string { return []string{"stats64", "stats32", "knn", "grep", "bitmap"} }

// lookupLambdaApp returns the named application.
func lookupLambdaApp(name string) (*lambdaApp, error) {
	switch name {
	case "stats64", "stats32":
		w := 8
		if name == "stats32" {
			w = 4
		}
		return &lambdaApp{
			name: name, function: name,
			outCap:      func(int) int { return functions.StatsSize },
			generate:    genInts,
			newCombiner: func() lambdaCombiner { return &statsCombiner{} },
			reference: func(file []byte) (string, error) {
				s, err := functions.Stats64(file)
				if w == 4 {
					s, err = functions.Stats32(file)
				}
				if err != nil {
					return "", err
				}
				return statsString(s), nil
			},
		}, nil
	case "knn":
		target := knnTarget()
		params := functions.EncodeKNN(target)
		return &lambdaApp{
			name: name, function: "knn", params: params,
			outCap:      func(n int) int { return n / (4 * lambdaKNNDim) * 8 },
			generate:    genVectors,
			newCombiner: func() lambdaCombiner { return newKNNCombiner(lambdaKNNK) },
			reference: func(file []byte) (string, error) {
				d, err := functions.KNN(append(slices.Clip(params), file...))
				if err != nil {
					return "", err
				}
				c := newKNNCombiner(lambdaKNNK)
				c.take(0, d)
				return c.result(), nil
			},
		}, nil
	case "grep":
		params := binary.LittleEndian.AppendUint32(nil, uint32(len(LambdaGrepPattern)))
		params = append(params, LambdaGrepPattern...)
		return &lambdaApp{
			name: name, function: "grep", params: params,
			// The output is at most the text's length + 1 (a text
			// without a final newline); ours always ends in one.
			outCap:      func(n int) int { return n + 1 },
			generate:    genText,
			newCombiner: func() lambdaCombiner { return newGrepCombiner() },
			reference: func(file []byte) (string, error) {
				out, err := functions.Grep(functions.EncodeGrep([]byte(LambdaGrepPattern), file))
				if err != nil {
					return "", err
				}
				c := newGrepCombiner()
				if err := c.add(0, len(file), out); err != nil {
					return "", err
				}
				return c.result(), nil
			},
		}, nil
	case "bitmap":
		return &lambdaApp{
			name: name, function: "bitmap", write: true,
			outCap:   func(n int) int { return n },
			generate: genBitmap,
		}, nil
	}
	return nil, fmt.Errorf("bench: no λ application %q: want one of %s", name, strings.Join(Apps(), ", "))
}

// lambdaReq is one request: the file's bytes [off, off+n).
type lambdaReq struct {
	off int64
	n   int
}

// planLambdaRequests cuts [0, size) into requests of reqSize bytes, the
// last one shorter if size is not a multiple. Both must be whole units of
// align bytes (lambdaBlock for the λ-IO applications, a row for TPC-H),
// so no record straddles two requests.
func planLambdaRequests(size int64, reqSize, align int) ([]lambdaReq, error) {
	if size <= 0 || size%int64(align) != 0 {
		return nil, fmt.Errorf("bench: size %d: want a positive multiple of %d", size, align)
	}
	if reqSize <= 0 || reqSize%align != 0 {
		return nil, fmt.Errorf("bench: request size %d: want a positive multiple of %d", reqSize, align)
	}
	reqs := make([]lambdaReq, 0, (size+int64(reqSize)-1)/int64(reqSize))
	for off := int64(0); off < size; off += int64(reqSize) {
		reqs = append(reqs, lambdaReq{off: off, n: int(min(int64(reqSize), size-off))})
	}
	return reqs, nil
}

// lambdaRNG is the dataset's random stream for one block: datasets are
// the same for a seed whatever the request size.
func lambdaRNG(seed uint64, block int64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(block)^0x6c616d626461))
}

// genInts makes size bytes of uniformly random bytes: little-endian u64s
// for stats64, u32s for stats32.
func genInts(size int64, seed uint64) []byte {
	return genBlocks(size, seed, func(p []byte, r *rand.Rand) {
		for i := 0; i < len(p); i += 8 {
			binary.LittleEndian.PutUint64(p[i:], r.Uint64())
		}
	})
}

// genBlocks makes size bytes, each lambdaBlock block filled by fill from
// the block's own random stream (lambdaRNG).
func genBlocks(size int64, seed uint64, fill func(p []byte, r *rand.Rand)) []byte {
	b := make([]byte, size)
	for blk := int64(0); blk*lambdaBlock < size; blk++ {
		fill(b[blk*lambdaBlock:(blk+1)*lambdaBlock], lambdaRNG(seed, blk))
	}
	return b
}

// statsCombiner adds up stats outputs: counts and sums add (the sum mod
// 2^64, as the function's), the minimum and maximum of the non-empty
// requests.
type statsCombiner struct{ s functions.Stats }

func (c *statsCombiner) add(_ int64, _ int, out []byte) error {
	p, err := functions.ParseStats(out)
	if err != nil {
		return err
	}
	if p.Count == 0 {
		return nil
	}
	if c.s.Count == 0 {
		c.s.Min, c.s.Max = p.Min, p.Max
	}
	c.s.Count += p.Count
	c.s.Sum += p.Sum
	c.s.Min = min(c.s.Min, p.Min)
	c.s.Max = max(c.s.Max, p.Max)
	return nil
}

func (c *statsCombiner) result() string { return statsString(c.s) }

func statsString(s functions.Stats) string {
	return fmt.Sprintf("count %d, sum %d (mod 2^64), min %d, max %d", s.Count, s.Sum, s.Min, s.Max)
}

// knnTarget is the vector KNN measures distances to.
func knnTarget() []int32 {
	r := lambdaRNG(0x6b6e6e, 0)
	t := make([]int32, lambdaKNNDim)
	for i := range t {
		t[i] = int32(r.IntN(2*lambdaKNNRange)) - lambdaKNNRange
	}
	return t
}

// genVectors makes size bytes of lambdaKNNDim-component s32 vectors.
func genVectors(size int64, seed uint64) []byte {
	return genBlocks(size, seed, func(p []byte, r *rand.Rand) {
		for i := 0; i < len(p); i += 4 {
			binary.LittleEndian.PutUint32(p[i:], uint32(int32(r.IntN(2*lambdaKNNRange))-lambdaKNNRange))
		}
	})
}

// knnHit is one vector's distance; the nearest are those with the least
// (dist, index).
type knnHit struct {
	dist  uint64
	index int64
}

func (a knnHit) less(b knnHit) bool {
	return a.dist < b.dist || a.dist == b.dist && a.index < b.index
}

// knnHeap is a max-heap of the k nearest so far: the root is the one to
// drop first.
type knnHeap []knnHit

func (h knnHeap) Len() int           { return len(h) }
func (h knnHeap) Less(i, j int) bool { return h[j].less(h[i]) }
func (h knnHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *knnHeap) Push(x any)        { *h = append(*h, x.(knnHit)) }
func (h *knnHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// knnCombiner keeps the k nearest vectors over all requests (the host's
// part of λ-IO's KNN), and the count and sum (mod 2^64) of all distances,
// so that every output counts in the comparison, not only the nearest.
type knnCombiner struct {
	k     int
	near  knnHeap
	count int64
	sum   uint64
}

func newKNNCombiner(k int) *knnCombiner { return &knnCombiner{k: k} }

func (c *knnCombiner) add(off int64, n int, out []byte) error {
	const vec = 4 * lambdaKNNDim
	if off%vec != 0 || n%vec != 0 {
		return fmt.Errorf("bench: knn request [%d, +%d) does not cover whole vectors", off, n)
	}
	if len(out) != n/vec*8 {
		return fmt.Errorf("bench: knn request [%d, +%d): %d bytes of output, want %d", off, n, len(out), n/vec*8)
	}
	d := make([]uint64, len(out)/8)
	for i := range d {
		d[i] = binary.LittleEndian.Uint64(out[8*i:])
	}
	c.take(off/vec, d)
	return nil
}

// take folds in the distances of the vectors from index first on.
func (c *knnCombiner) take(first int64, d []uint64) {
	for i, x := range d {
		c.count++
		c.sum += x
		h := knnHit{dist: x, index: first + int64(i)}
		if len(c.near) < c.k {
			heap.Push(&c.near, h)
		} else if h.less(c.near[0]) {
			c.near[0] = h
			heap.Fix(&c.near, 0)
		}
	}
}

func (c *knnCombiner) result() string {
	near := slices.Clone(c.near)
	slices.SortFunc(near, func(a, b knnHit) int {
		if a.less(b) {
			return -1
		}
		if b.less(a) {
			return 1
		}
		return 0
	})
	parts := make([]string, len(near))
	for i, h := range near {
		parts[i] = fmt.Sprintf("#%d:%d", h.index, h.dist)
	}
	return fmt.Sprintf("%d vectors, distance sum %d (mod 2^64), %d nearest %s", c.count, c.sum, len(near), strings.Join(parts, " "))
}

// genText makes size bytes of text: lines of words, every block's last
// byte a newline, so that no line straddles two blocks (and so two
// requests). About one line in lambdaGrepEvery holds LambdaGrepPattern.
func genText(size int64, seed uint64) []byte {
	b := make([]byte, 0, size)
	for blk := int64(0); blk*lambdaBlock < size; blk++ {
		r := lambdaRNG(seed, blk)
		end := len(b) + lambdaBlock
		for len(b) < end {
			room := end - len(b) // bytes left in the block, the newline included
			want := 40 + r.IntN(80)
			match := r.IntN(lambdaGrepEvery) == 0
			line := b
			for n := 0; len(line)-len(b) < want; n++ {
				w := lambdaWords[r.IntN(len(lambdaWords))]
				if match && n == 1 {
					w = LambdaGrepPattern
				}
				if len(line) > len(b) {
					line = append(line, ' ')
				}
				line = append(line, w...)
			}
			if len(line)-len(b)+1 > room {
				// The block's last line: whatever of it fits (it may
				// lose the pattern, which the reference sees alike).
				line = line[:len(b)+room-1]
			}
			b = append(line, '\n')
		}
	}
	return b
}

// grepCombiner concatenates the matching lines, in request order, and
// keeps their count, length and SHA-256.
type grepCombiner struct {
	h     hash.Hash
	lines int64
	bytes int64
}

func newGrepCombiner() *grepCombiner { return &grepCombiner{h: sha256.New()} }

func (c *grepCombiner) add(off int64, n int, out []byte) error {
	if len(out) > 0 && out[len(out)-1] != '\n' {
		return fmt.Errorf("bench: grep request [%d, +%d): output does not end a line", off, n)
	}
	c.lines += int64(bytes.Count(out, []byte{'\n'}))
	c.bytes += int64(len(out))
	_, _ = c.h.Write(out)
	return nil
}

func (c *grepCombiner) result() string {
	return fmt.Sprintf("%d matching lines, %d bytes, sha256 %s", c.lines, c.bytes, hex.EncodeToString(c.h.Sum(nil))[:16])
}

// genBitmap makes the bitmap bitmap's λ writes must leave in the file:
// runs of ones and zeroes of random lengths (1 to 1024 bits, so the
// run-length encoding the host sends is about a sixteenth of the bitmap).
func genBitmap(size int64, seed uint64) []byte {
	b := make([]byte, size)
	r := lambdaRNG(seed, -1)
	bits := size * 8
	one := r.IntN(2) == 1
	for pos := int64(0); pos < bits; {
		n := min(int64(1+r.IntN(1024)), bits-pos)
		if one {
			setBits(b, pos, n)
		}
		pos += n
		one = !one
	}
	return b
}

// setBits sets bits [pos, pos+n) of b, least significant bit first.
func setBits(b []byte, pos, n int64) {
	for ; n > 0 && pos%8 != 0; n, pos = n-1, pos+1 {
		b[pos/8] |= 1 << (pos % 8)
	}
	for ; n >= 8; n, pos = n-8, pos+8 {
		b[pos/8] = 0xff
	}
	for ; n > 0; n, pos = n-1, pos+1 {
		b[pos/8] |= 1 << (pos % 8)
	}
}

// encodeBitmapRequests returns each request's λ write input: the
// run-length encoding of the bitmap's bytes the request covers.
func encodeBitmapRequests(bitmap []byte, reqs []lambdaReq) [][]byte {
	in := make([][]byte, len(reqs))
	for i, q := range reqs {
		chunk := bitmap[q.off : q.off+int64(q.n)]
		in[i] = functions.EncodeBitmap(chunk, 8*len(chunk))
	}
	return in
}

// bitmapReference expands the requests' inputs natively, all in one
// call, as the native reference of what the file must hold.
func bitmapReference(inputs [][]byte) ([]byte, error) {
	var all []byte
	for _, in := range inputs {
		all = append(all, in...)
	}
	return functions.BitmapExpand(all)
}

// firstDiff returns the index of the first byte where a and b differ, or
// -1 if they are equal.
func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i += 4096 {
		j := min(i+4096, n)
		if !bytes.Equal(a[i:j], b[i:j]) {
			for k := i; k < j; k++ {
				if a[k] != b[k] {
					return k
				}
			}
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}

package functions

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

var le = binary.LittleEndian

// ComputeFunc is a native Go compute entry with the C functions' contract:
// it reads in, writes at most len(out) bytes of out and returns how many,
// or a *sandbox.FunctionError with the code the C function returns.
type ComputeFunc func(in, out []byte) (int, error)

// Native returns the native implementation of the named compute function,
// or nil if it has none (btree_lookup is a pushdown: see BTreeStep).
func Native(name string) ComputeFunc {
	switch name {
	case "stats64":
		return computeStats64
	case "stats32":
		return computeStats32
	case "knn":
		return computeKNN
	case "grep":
		return computeGrep
	case "bitmap":
		return computeBitmap
	case "tpch_q1":
		return computeTPCHQ1
	case "tpch_q6":
		return computeTPCHQ6
	case "tpch_q12":
		return computeTPCHQ12
	case "tpch_q14":
		return computeTPCHQ14
	}
	return nil
}

// StatsSize is the size of the stats functions' output.
const StatsSize = 32

// Stats is the output of stats64 and stats32: four little-endian u64s,
// count, sum (mod 2^64), min and max, all zero for an empty input.
type Stats struct {
	Count, Sum, Min, Max uint64
}

// AppendBinary appends the 32-byte encoding of s.
func (s Stats) AppendBinary(b []byte) ([]byte, error) {
	b = le.AppendUint64(b, s.Count)
	b = le.AppendUint64(b, s.Sum)
	b = le.AppendUint64(b, s.Min)
	return le.AppendUint64(b, s.Max), nil
}

// ParseStats decodes a stats function's output.
func ParseStats(b []byte) (Stats, error) {
	if len(b) != StatsSize {
		return Stats{}, fmt.Errorf("functions: stats output is %d bytes, want %d", len(b), StatsSize)
	}
	return Stats{le.Uint64(b), le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:])}, nil
}

// Stats64 is stats64 on in, a sequence of little-endian u64s.
func Stats64(in []byte) (Stats, error) { return stats(in, 8) }

// Stats32 is stats32 on in, a sequence of little-endian u32s.
func Stats32(in []byte) (Stats, error) { return stats(in, 4) }

func stats(in []byte, w int) (Stats, error) {
	if len(in)%w != 0 {
		return Stats{}, fnErr(EINVAL)
	}
	s := Stats{Count: uint64(len(in) / w), Min: ^uint64(0)}
	for i := 0; i < len(in); i += w {
		var x uint64
		if w == 8 {
			x = le.Uint64(in[i:])
		} else {
			x = uint64(le.Uint32(in[i:]))
		}
		s.Sum += x
		s.Min = min(s.Min, x)
		s.Max = max(s.Max, x)
	}
	if s.Count == 0 {
		s.Min = 0
	}
	return s, nil
}

func computeStats(in, out []byte, w int) (int, error) {
	if len(in)%w != 0 {
		return 0, fnErr(EINVAL)
	}
	if len(out) < StatsSize {
		return 0, fnErr(ERANGE)
	}
	s, err := stats(in, w)
	if err != nil {
		return 0, err
	}
	_, _ = s.AppendBinary(out[:0])
	return StatsSize, nil
}

func computeStats64(in, out []byte) (int, error) { return computeStats(in, out, 8) }
func computeStats32(in, out []byte) (int, error) { return computeStats(in, out, 4) }

// EncodeKNN builds knn's input: the header {u32 dim, u32 0}, the target,
// then the vectors, all little-endian s32. Every vector must have the
// target's length.
func EncodeKNN(target []int32, vectors ...[]int32) []byte {
	b := make([]byte, 0, 8+4*len(target)*(1+len(vectors)))
	b = le.AppendUint32(b, uint32(len(target)))
	b = le.AppendUint32(b, 0)
	for _, x := range target {
		b = le.AppendUint32(b, uint32(x))
	}
	for _, v := range vectors {
		if len(v) != len(target) {
			panic("functions: EncodeKNN: vector length differs from the target's")
		}
		for _, x := range v {
			b = le.AppendUint32(b, uint32(x))
		}
	}
	return b
}

// KNN is knn on in (see EncodeKNN): the squared L2 distance, mod 2^64, of
// every vector to the target.
func KNN(in []byte) ([]uint64, error) {
	n, err := knnCount(in)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 8*n)
	if _, err := computeKNN(in, out); err != nil {
		return nil, err
	}
	d := make([]uint64, n)
	for i := range d {
		d[i] = le.Uint64(out[8*i:])
	}
	return d, nil
}

func knnCount(in []byte) (int, error) {
	if len(in) < 8 {
		return 0, fnErr(EINVAL)
	}
	dim := uint64(le.Uint32(in))
	if dim == 0 || le.Uint32(in[4:]) != 0 || dim > uint64(len(in)-8)/4 {
		return 0, fnErr(EINVAL)
	}
	rest := uint64(len(in)) - 8 - 4*dim
	if rest%(4*dim) != 0 {
		return 0, fnErr(EINVAL)
	}
	return int(rest / (4 * dim)), nil
}

func computeKNN(in, out []byte) (int, error) {
	n, err := knnCount(in)
	if err != nil {
		return 0, err
	}
	if 8*n > len(out) {
		return 0, fnErr(ERANGE)
	}
	dim := int(le.Uint32(in))
	t := in[8 : 8+4*dim]
	v := in[8+4*dim:]
	for i := range n {
		var d uint64
		for j := 0; j < 4*dim; j += 4 {
			x := uint64(int64(int32(le.Uint32(v[j:]))) - int64(int32(le.Uint32(t[j:]))))
			d += x * x
		}
		le.PutUint64(out[8*i:], d)
		v = v[4*dim:]
	}
	return 8 * n, nil
}

// EncodeGrep builds grep's input: {u32 len(pattern); pattern} then text.
func EncodeGrep(pattern, text []byte) []byte {
	b := make([]byte, 0, 4+len(pattern)+len(text))
	b = le.AppendUint32(b, uint32(len(pattern)))
	b = append(b, pattern...)
	return append(b, text...)
}

// Grep is grep on in (see EncodeGrep): the rows of the text that contain
// the pattern, each followed by '\n'.
func Grep(in []byte) ([]byte, error) {
	out := make([]byte, len(in)+1)
	n, err := computeGrep(in, out)
	if err != nil {
		return nil, err
	}
	return out[:n], nil
}

// computeGrep scans the whole text rather than row by row, as grep.c
// does: bytes.Index (vectorized) finds the next occurrence, which lies in
// one row because the pattern holds no '\n', and the row around it is
// copied out. Matching rows tend to come in runs (with a common pattern,
// every row), so the rows after a match are then checked one at a time
// until one does not match, and the whole-text scan resumes after it.
func computeGrep(in, out []byte) (int, error) {
	if len(in) < 4 {
		return 0, fnErr(EINVAL)
	}
	m := uint64(le.Uint32(in))
	if m > uint64(len(in)-4) {
		return 0, fnErr(EINVAL)
	}
	pat, text := in[4:4+m], in[4+m:]
	if len(pat) == 0 {
		// Every row: the text, with the last row's '\n' if it lacks one.
		n := len(text)
		if n > 0 && text[n-1] != '\n' {
			n++
		}
		if n > len(out) {
			return 0, fnErr(ERANGE)
		}
		if copy(out, text) < n {
			out[n-1] = '\n'
		}
		return n, nil
	}
	if bytes.IndexByte(pat, '\n') >= 0 {
		return 0, nil // no row holds a '\n'
	}
	o := 0
	for len(text) > 0 {
		i := bytes.Index(text, pat)
		if i < 0 {
			break
		}
		start := bytes.LastIndexByte(text[:i], '\n') + 1
		row, rest, _ := bytes.Cut(text[start:], []byte{'\n'})
		for {
			if len(row)+1 > len(out)-o {
				return 0, fnErr(ERANGE)
			}
			o += copy(out[o:], row)
			out[o] = '\n'
			o++
			text = rest
			if len(text) == 0 {
				break
			}
			row, rest, _ = bytes.Cut(text, []byte{'\n'})
			if !bytes.Contains(row, pat) {
				text = rest
				break
			}
		}
	}
	return o, nil
}

// EncodeBitmap builds bitmap's input from the first nbits bits of bitmap
// (least significant bit first): the shortest list of runs, each at most
// 2^31-1 bits long.
func EncodeBitmap(bitmap []byte, nbits int) []byte {
	var b []byte
	for i := 0; i < nbits; {
		bit := bitmap[i/8] >> (i % 8) & 1
		j := i + 1
		for j < nbits && j-i < 1<<31-1 && bitmap[j/8]>>(j%8)&1 == bit {
			j++
		}
		b = le.AppendUint32(b, uint32(j-i)|uint32(bit)<<31)
		i = j
	}
	return b
}

// BitmapExpand is bitmap on in: the bits of the runs, packed least
// significant bit first, with the last byte's unused bits zero.
func BitmapExpand(in []byte) ([]byte, error) {
	total, err := bitmapBits(in)
	if err != nil {
		return nil, err
	}
	out := make([]byte, (total+7)/8)
	n, err := computeBitmap(in, out)
	if err != nil {
		return nil, err
	}
	return out[:n], nil
}

func bitmapBits(in []byte) (uint64, error) {
	if len(in)%4 != 0 {
		return 0, fnErr(EINVAL)
	}
	var total uint64
	for i := 0; i < len(in); i += 4 {
		total += uint64(le.Uint32(in[i:]) & 0x7fffffff)
	}
	return total, nil
}

func computeBitmap(in, out []byte) (int, error) {
	total, err := bitmapBits(in)
	if err != nil {
		return 0, err
	}
	if (total+7)/8 > uint64(len(out)) {
		return 0, fnErr(ERANGE)
	}
	o := out[:(total+7)/8]
	clear(o)
	var pos uint64
	for i := 0; i < len(in); i += 4 {
		w := le.Uint32(in[i:])
		n := uint64(w & 0x7fffffff)
		if w>>31 == 0 {
			pos += n
			continue
		}
		for ; n > 0 && pos%8 != 0; n-- {
			o[pos/8] |= 1 << (pos % 8)
			pos++
		}
		for ; n >= 8; n -= 8 {
			o[pos/8] = 0xff
			pos += 8
		}
		for ; n > 0; n-- {
			o[pos/8] |= 1 << (pos % 8)
			pos++
		}
	}
	return len(o), nil
}

package functions

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nearstore/nearstore/sandbox"
)

func u64s(xs ...uint64) []byte {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

// u64Run is n u64s counting up from base, but for element at, which is x.
func u64Run(n int, base uint64, at int, x uint64) []byte {
	xs := make([]uint64, n)
	for i := range xs {
		xs[i] = base + uint64(i)
	}
	xs[at] = x
	return u64s(xs...)
}

// u64RunSum is the sum (mod 2^64) of u64Run's elements.
func u64RunSum(n int, base uint64, at int, x uint64) uint64 {
	var sum uint64
	for i := range n {
		sum += base + uint64(i)
	}
	return sum - (base + uint64(at)) + x
}

func u32s(xs ...uint32) []byte {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

func code(err error) int32 {
	var fe *sandbox.FunctionError
	if errors.As(err, &fe) {
		return fe.Code
	}
	return 0
}

func TestNamesAndModules(t *testing.T) {
	want := []string{"bitmap", "btree_lookup", "grep", "knn", "lsm_get", "stats32", "stats64", "tpch_q1", "tpch_q12", "tpch_q14", "tpch_q6"}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, name := range want {
		w, err := Module(name, sandbox.KindWasm)
		if err != nil {
			t.Fatal(err)
		}
		if k, _ := sandbox.DetectKind(w); k != sandbox.KindWasm {
			t.Errorf("%s.wasm: kind %v", name, k)
		}
		e, err := Module(name, sandbox.KindEBPF)
		if err != nil {
			t.Fatal(err)
		}
		if k, _ := sandbox.DetectKind(e); k != sandbox.KindEBPF {
			t.Errorf("%s.o: kind %v", name, k)
		}
		if (Native(name) == nil) != (name == "btree_lookup" || name == "lsm_get") {
			t.Errorf("Native(%q) = %v", name, Native(name))
		}
	}
	for _, bad := range []string{"", "nope", "../go", "wasm/knn"} {
		if _, err := Module(bad, sandbox.KindWasm); err == nil {
			t.Errorf("Module(%q) succeeded", bad)
		}
	}
	if _, err := Module("knn", 9); err == nil {
		t.Error("Module of kind 9 succeeded")
	}
}

// computeCase is one input of a compute function: its expected output, or
// the error code.
type computeCase struct {
	name   string
	fn     string
	in     []byte
	outCap int
	want   []byte
	code   int32
}

var computeCases = []computeCase{
	{"stats64 empty", "stats64", nil, 32, u64s(0, 0, 0, 0), 0},
	{"stats64 one", "stats64", u64s(7), 32, u64s(1, 7, 7, 7), 0},
	{"stats64 many", "stats64", u64s(5, 1, 9, 3), 64, u64s(4, 18, 1, 9), 0},
	{"stats64 wraps", "stats64", u64s(^uint64(0), 2), 32, u64s(2, 1, 2, ^uint64(0)), 0},
	// Past the 128 elements of wasm's SIMD block, with the top bit set
	// and clear on either side of min and max (a signed compare would
	// swap them), in both lanes and in the scalar tail.
	{"stats64 top bit, min in a block", "stats64", u64Run(300, 0x8000000000000000, 5, 0x7fffffffffffffff), 32,
		u64s(300, u64RunSum(300, 0x8000000000000000, 5, 0x7fffffffffffffff), 0x7fffffffffffffff, 0x8000000000000000+299), 0},
	{"stats64 top bit, max in a block", "stats64", u64Run(257, 0x7fffffffffffff00, 130, ^uint64(0)), 32,
		u64s(257, u64RunSum(257, 0x7fffffffffffff00, 130, ^uint64(0)), 0x7fffffffffffff00, ^uint64(0)), 0},
	{"stats64 top bit, min in the tail", "stats64", u64Run(131, 0x8000000000000001, 130, 0), 32,
		u64s(131, u64RunSum(131, 0x8000000000000001, 130, 0), 0, 0x8000000000000001+129), 0},
	{"stats64 ragged", "stats64", make([]byte, 9), 32, nil, EINVAL},
	{"stats64 small out", "stats64", u64s(1), 31, nil, ERANGE},
	{"stats32 empty", "stats32", nil, 32, u64s(0, 0, 0, 0), 0},
	{"stats32 many", "stats32", u32s(5, 1, 0xffffffff, 3), 32, u64s(4, 0x100000008, 1, 0xffffffff), 0},
	{"stats32 ragged", "stats32", make([]byte, 6), 32, nil, EINVAL},
	{"stats32 small out", "stats32", nil, 0, nil, ERANGE},
	{"knn two", "knn", EncodeKNN([]int32{1, 2}, []int32{1, 2}, []int32{4, -2}), 16, u64s(0, 25), 0},
	{"knn none", "knn", EncodeKNN([]int32{1, 2, 3}), 0, nil, 0},
	{"knn extremes", "knn", EncodeKNN([]int32{-1 << 31}, []int32{1<<31 - 1}), 8, u64s(0xfffffffe00000001), 0},
	{"knn short", "knn", []byte{1, 0, 0}, 8, nil, EINVAL},
	{"knn dim 0", "knn", u32s(0, 0), 8, nil, EINVAL},
	{"knn reserved", "knn", u32s(1, 1, 0, 0), 8, nil, EINVAL},
	{"knn no target", "knn", u32s(2, 0, 0), 8, nil, EINVAL},
	{"knn ragged", "knn", append(EncodeKNN([]int32{1, 2}), 0, 0, 0, 0), 8, nil, EINVAL},
	{"knn small out", "knn", EncodeKNN([]int32{1}, []int32{1}, []int32{2}), 15, nil, ERANGE},
	{"grep rows", "grep", EncodeGrep([]byte("ab"), []byte("xab\nno\nabab\n\nzab")), 100, []byte("xab\nabab\nzab\n"), 0},
	{"grep none", "grep", EncodeGrep([]byte("q"), []byte("a\nb\n")), 0, nil, 0},
	{"grep empty pattern", "grep", EncodeGrep(nil, []byte("a\n\nb")), 100, []byte("a\n\nb\n"), 0},
	{"grep empty text", "grep", EncodeGrep([]byte("a"), nil), 0, nil, 0},
	{"grep long pattern", "grep", EncodeGrep([]byte("abcdef"), []byte("abcde\nabcdef")), 100, []byte("abcdef\n"), 0},
	{"grep partial prefix", "grep", EncodeGrep([]byte("aab"), []byte("aaab")), 100, []byte("aaab\n"), 0},
	{"grep newline pattern", "grep", EncodeGrep([]byte("a\nb"), []byte("a\nb")), 100, nil, 0},
	{"grep short", "grep", []byte{1, 0}, 100, nil, EINVAL},
	{"grep pattern past end", "grep", u32s(5, 0), 100, nil, EINVAL},
	{"grep small out", "grep", EncodeGrep([]byte("a"), []byte("abc\nabc")), 7, nil, ERANGE},
	{"grep exact out", "grep", EncodeGrep([]byte("a"), []byte("abc\nabc")), 8, []byte("abc\nabc\n"), 0},
	{"bitmap empty", "bitmap", nil, 0, nil, 0},
	{"bitmap bits", "bitmap", u32s(1<<31|3, 2, 1<<31|1), 1, []byte{0x27}, 0},
	{"bitmap spans", "bitmap", u32s(4, 1<<31|12, 0, 1<<31, 3), 3, []byte{0xf0, 0xff, 0x00}, 0},
	{"bitmap long", "bitmap", u32s(1, 1<<31|70, 1), 9, append(append([]byte{0xfe}, bytes.Repeat([]byte{0xff}, 7)...), 0x7f), 0},
	{"bitmap ragged", "bitmap", []byte{1, 2, 3}, 8, nil, EINVAL},
	{"bitmap small out", "bitmap", u32s(1<<31 | 9), 1, nil, ERANGE},
}

func TestNativeCompute(t *testing.T) {
	for _, c := range computeCases {
		t.Run(c.name, func(t *testing.T) {
			out := bytes.Repeat([]byte{0xaa}, c.outCap)
			n, err := Native(c.fn)(c.in, out)
			if code(err) != c.code || (err != nil && c.code == 0) {
				t.Fatalf("err = %v, want code %d", err, c.code)
			}
			if err == nil && !bytes.Equal(out[:n], c.want) {
				t.Fatalf("out = %x, want %x", out[:n], c.want)
			}
		})
	}
}

func TestTypedHelpers(t *testing.T) {
	s, err := Stats64(u64s(3, 4))
	if err != nil || s != (Stats{2, 7, 3, 4}) {
		t.Fatalf("Stats64 = %+v, %v", s, err)
	}
	b, _ := s.AppendBinary(nil)
	if p, err := ParseStats(b); err != nil || p != s {
		t.Fatalf("ParseStats = %+v, %v", p, err)
	}
	if _, err := ParseStats(b[:31]); err == nil {
		t.Fatal("ParseStats of 31 bytes succeeded")
	}
	if s, err := Stats32(u32s(3, 9, 1)); err != nil || s != (Stats{3, 13, 1, 9}) {
		t.Fatalf("Stats32 = %+v, %v", s, err)
	}
	if d, err := KNN(EncodeKNN([]int32{0, 0}, []int32{3, 4}, []int32{-1, 1})); err != nil || !slices.Equal(d, []uint64{25, 2}) {
		t.Fatalf("KNN = %v, %v", d, err)
	}
	if g, err := Grep(EncodeGrep([]byte("x"), []byte("x"))); err != nil || string(g) != "x\n" {
		t.Fatalf("Grep = %q, %v", g, err)
	}
	if _, err := Stats64([]byte{1}); code(err) != EINVAL || !errors.Is(err, sandbox.ErrFunction) {
		t.Fatalf("Stats64 of 1 byte: %v", err)
	}
}

func TestBitmapRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		nbits := r.IntN(2000)
		bm := make([]byte, (nbits+7)/8)
		// Runs of random lengths, so both short and long runs appear.
		for i := 0; i < nbits; {
			n := 1 + r.IntN(1+r.IntN(100))
			bit := r.IntN(2)
			for j := i; j < min(i+n, nbits); j++ {
				bm[j/8] |= byte(bit) << (j % 8)
			}
			i += n
		}
		got, err := BitmapExpand(EncodeBitmap(bm, nbits))
		if err != nil || !bytes.Equal(got, bm) {
			t.Fatalf("%d bits: %x, %v; want %x", nbits, got, err, bm)
		}
	}
}

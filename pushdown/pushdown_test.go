package pushdown

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/volume"
)

func TestRequestRoundTrip(t *testing.T) {
	r := Request{
		Function:    sandbox.IDOf([]byte("f")),
		Files:       []File{{ID: 7, Version: 3, Size: 5000, Extents: []Extent{{LBA: 10, Blocks: 4}, {LBA: 100, Blocks: 8}}}, Raw(1<<20, 512)},
		StartOffset: 4096, StartLength: 512, StartFile: 0,
		Params: []byte("scratch"), Data: []byte("data!"),
	}
	b := r.Marshal()
	var got Request
	if err := got.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if got.Function != r.Function || len(got.Files) != 2 || got.Files[0].Version != 3 || got.Files[0].Extents[1].LBA != 100 ||
		got.StartOffset != 4096 || string(got.Params) != "scratch" || string(got.Data) != "data!" {
		t.Fatalf("round trip: %+v", got)
	}
	for _, tc := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:10] }},
		{"format", func(b []byte) []byte { b[32] = 9; return b }},
		{"no files", func(b []byte) []byte { b[34], b[35] = 0, 0; return b }},
		{"start file missing", func(b []byte) []byte { b[60] = 5; return b }},
		{"extent count too big", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[64+24:], 1<<20); return b }},
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }},
		{"params longer than the rest", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[40:], 999); return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := new(Request).Unmarshal(tc.edit(append([]byte(nil), b...))); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
}

// TestRequestUnmarshalReuse: decoding into a Request again reuses its
// storage, and each decode reads back exactly its own table, whether it
// fits the Request's arrays or not; a small table decodes with no
// allocation.
func TestRequestUnmarshalReuse(t *testing.T) {
	table := func(nfiles, extentsEach int, lba uint64) []File {
		fs := make([]File, nfiles)
		for i := range fs {
			fs[i] = File{ID: uint64(i + 1), Version: lba, Size: 1 << 20}
			for j := range extentsEach {
				fs[i].Extents = append(fs[i].Extents, Extent{LBA: lba + uint64(100*i+j), Blocks: uint32(j + 1)})
			}
		}
		return fs
	}
	var got Request
	for _, tc := range []struct{ nfiles, extentsEach int }{
		{2, 3}, {1, 0}, {inlineFiles, inlineExtents / inlineFiles}, {MaxFiles, 5}, {3, 40}, {2, 2},
	} {
		want := table(tc.nfiles, tc.extentsEach, uint64(1000*tc.nfiles+tc.extentsEach))
		if err := got.Unmarshal((&Request{Files: want, Params: []byte{1}}).Marshal()); err != nil {
			t.Fatal(err)
		}
		if len(got.Files) != len(want) {
			t.Fatalf("%d files, want %d", len(got.Files), len(want))
		}
		for i, f := range got.Files {
			w := want[i]
			if f.ID != w.ID || f.Version != w.Version || f.Size != w.Size || len(f.Extents) != len(w.Extents) || cap(f.Extents) != len(w.Extents) {
				t.Fatalf("%d×%d: file %d is %+v, want %+v", tc.nfiles, tc.extentsEach, i, f, w)
			}
			for j := range f.Extents {
				if f.Extents[j] != w.Extents[j] {
					t.Fatalf("%d×%d: file %d extent %d is %v, want %v", tc.nfiles, tc.extentsEach, i, j, f.Extents[j], w.Extents[j])
				}
			}
		}
	}
	b := (&Request{Files: table(2, 3, 7), Params: []byte{1}}).Marshal()
	var r Request
	if n := testing.AllocsPerRun(100, func() {
		if err := r.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("decoding a two-file table allocates %v times", n)
	}
}

func FuzzRequestUnmarshal(f *testing.F) {
	f.Add((&Request{Files: []File{Raw(1<<20, 512)}, Params: []byte{1}}).Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		if r.Unmarshal(b) != nil {
			return
		}
		// Whatever decodes re-encodes to the same bytes (reserved fields aside).
		again := r.Marshal()
		if len(again) != len(b) {
			t.Fatalf("re-encoded %d bytes from %d", len(again), len(b))
		}
		// Decoded into a Request that held another table, it reads the same.
		var used Request
		if err := used.Unmarshal(reuseSeed); err != nil {
			t.Fatal(err)
		}
		if err := used.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(used.Marshal(), again) {
			t.Fatal("decoding over another table reads differently")
		}
	})
}

// reuseSeed is a request whose table is past a Request's arrays.
var reuseSeed = (&Request{Files: []File{
	{ID: 1, Size: 1 << 30, Extents: make([]Extent, 20)}, {ID: 2, Extents: []Extent{{LBA: 9, Blocks: 1}}},
	{}, {}, {Size: 7},
}}).Marshal()

func TestMapRange(t *testing.T) {
	files := []File{{Size: 6 * 512, Extents: []Extent{{LBA: 10, Blocks: 2}, {LBA: 50, Blocks: 4}}}}
	got, err := mapRange(files, 0, 700, 1000, 512)
	if err != nil {
		t.Fatal(err)
	}
	want := []span{{10*512 + 700, 324}, {50 * 512, 676}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("spans %v, want %v", got, want)
	}
	for _, tc := range []struct {
		fi       uint32
		off, len uint64
	}{{1, 0, 1}, {0, 6 * 512, 1}, {0, 0, 6*512 + 1}, {0, ^uint64(0), 2}} {
		if _, err := mapRange(files, tc.fi, tc.off, tc.len, 512); !errors.Is(err, ErrOutsideFile) {
			t.Errorf("file %d [%d,+%d): %v, want ErrOutsideFile", tc.fi, tc.off, tc.len, err)
		}
	}
}

// chain is a pushdown function written in Go against the Instance API: each
// 512-byte block holds the offset of the next (0 ends) and a byte to add to
// scratch. It stands in for a wasm or eBPF module so these tests exercise
// the executor's rules alone; misbehave makes it hostile.
type chain struct {
	misbehave string
	acquired  int    // instances handed out
	onStep    func() // called at every step, if set
}

func (c *chain) ID() sandbox.ID              { return sandbox.IDOf([]byte(c.misbehave)) }
func (c *chain) Kind() sandbox.Kind          { return sandbox.KindWasm }
func (c *chain) HasPushdown() bool           { return true }
func (c *chain) HasCompute() bool            { return true }
func (c *chain) Close(context.Context) error { return nil }
func (c *chain) Acquire(context.Context) (sandbox.Instance, error) {
	c.acquired++
	return &chainInst{c: c, scratch: make([]byte, sandbox.ScratchSize)}, nil
}

type chainInst struct {
	c        *chain
	scratch  []byte
	data     []byte
	in, out  []byte
	released bool
}

func (i *chainInst) Data(n int) ([]byte, error) { i.data = make([]byte, n); return i.data, nil }
func (i *chainInst) Scratch() []byte            { return i.scratch }
func (i *chainInst) ResultLen() int             { return len(i.scratch) }
func (i *chainInst) Input(n int) ([]byte, error) {
	i.in = make([]byte, n)
	return i.in, nil
}
func (i *chainInst) Output(n int) ([]byte, error) {
	if len(i.out) != n {
		i.out = make([]byte, n)
	}
	return i.out, nil
}
func (i *chainInst) Release() { i.released = true }

func (i *chainInst) Step(_ context.Context, file uint32, off uint64, n int) (bool, []sandbox.Next, error) {
	if i.c.onStep != nil {
		i.c.onStep()
	}
	next := binary.LittleEndian.Uint64(i.data)
	i.scratch[0] += i.data[8]
	switch i.c.misbehave {
	case "other file":
		return false, []sandbox.Next{{File: 3, Offset: 0, Len: 512}}, nil
	case "past end":
		return false, []sandbox.Next{{File: 0, Offset: 8*512 - 100, Len: 512}}, nil
	case "forever":
		return false, []sandbox.Next{{File: 0, Offset: 0, Len: 512}}, nil
	case "stall":
		return false, nil, nil
	case "huge step":
		return false, []sandbox.Next{{File: 0, Offset: 0, Len: 512}, {File: 0, Offset: 0, Len: 1 << 20}}, nil
	case "error":
		return false, nil, &sandbox.FunctionError{Code: -5}
	}
	if next == 0 {
		return true, nil, nil
	}
	return false, []sandbox.Next{{File: 0, Offset: next, Len: 512}}, nil
}

func (i *chainInst) Compute(_ context.Context, inLen, outCap int) (int, error) {
	// Reverse the input: enough to see where bytes go.
	n := min(inLen, outCap)
	for k := 0; k < n; k++ {
		i.out[k] = i.in[inLen-1-k]
	}
	return n, nil
}

// chainDevice lays a 7-block chain out in a file whose extents are
// scattered over a memory volume.
func chainDevice(t *testing.T) (volume.Volume, File) {
	v, err := volume.Open("mem:1MiB")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	f := File{ID: 1, Size: 8 * 512, Extents: []Extent{{LBA: 100, Blocks: 3}, {LBA: 7, Blocks: 5}}}
	// File block k holds: next = (k+1)*512 for k < 6, then 0; add = k+1.
	for k := uint64(0); k < 7; k++ {
		b := make([]byte, 512)
		if k < 6 {
			binary.LittleEndian.PutUint64(b, (k+1)*512)
		}
		b[8] = byte(k + 1)
		spans, err := mapRange([]File{f}, 0, k*512, 512, 512)
		if err != nil || len(spans) != 1 {
			t.Fatal(err)
		}
		if _, err := v.WriteAt(b, spans[0].off); err != nil {
			t.Fatal(err)
		}
	}
	return v, f
}

func TestPushdownChain(t *testing.T) {
	v, f := chainDevice(t)
	e := &Executor{}
	req := &Request{Files: []File{f}, StartLength: 512, Params: []byte{100}}
	res, err := e.Pushdown(context.Background(), v, &chain{}, req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Done || res.Steps != 7 || res.Reads != 7 || res.BytesRead != 7*512 {
		t.Fatalf("result %+v", res)
	}
	if res.Output[0] != 100+1+2+3+4+5+6+7 {
		t.Fatalf("scratch[0] = %d", res.Output[0])
	}
}

func TestPushdownRules(t *testing.T) {
	v, f := chainDevice(t)
	for _, tc := range []struct {
		misbehave string
		files     []File
		want      error
	}{
		{"other file", nil, ErrOutsideFile},
		{"past end", nil, ErrOutsideFile},
		{"forever", nil, ErrStepLimit},
		{"stall", nil, ErrNoProgress},
		{"huge step", nil, ErrStepSize},
		{"error", nil, sandbox.ErrFunction},
		{"", []File{{Size: 512, Extents: []Extent{{LBA: 1 << 30, Blocks: 1}}}}, ErrBadExtent},
		{"", []File{{Size: 4096, Extents: []Extent{{LBA: 0, Blocks: 1}}}}, ErrBadExtent},
	} {
		t.Run(tc.misbehave+tc.want.Error(), func(t *testing.T) {
			files := tc.files
			if files == nil {
				files = []File{f}
			}
			req := &Request{Files: files, StartLength: 512}
			res, err := (&Executor{}).Pushdown(context.Background(), v, &chain{misbehave: tc.misbehave}, req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if tc.misbehave == "error" && res.Code != -5 {
				t.Fatalf("function code %d, want -5", res.Code)
			}
		})
	}
}

func TestLambda(t *testing.T) {
	v, err := volume.Open("mem:1MiB")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	file := File{Size: 4096, Extents: []Extent{{LBA: 64, Blocks: 8}}}
	content := bytes.Repeat([]byte("abcdefgh"), 512)
	if _, err := v.WriteAt(content, 64*512); err != nil {
		t.Fatal(err)
	}
	e := &Executor{}
	res, err := e.LambdaRead(context.Background(), v, &chain{}, &Request{Files: []File{file}, StartOffset: 8, StartLength: 8, Params: []byte("P")}, 100)
	if err != nil || string(res.Output) != "hgfedcbaP" || res.Reads != 1 || res.BytesRead != 8 {
		t.Fatalf("λ read: %q %+v %v", res.Output, res, err)
	}
	// λ write: output lands in the named range, padded to a block, nowhere else.
	before := make([]byte, 1<<20)
	_, _ = v.ReadAt(before, 0)
	_, n, err := e.LambdaWrite(context.Background(), v, &chain{}, &Request{Files: []File{file}, StartOffset: 1024, StartLength: 1024, Data: []byte("xyz")})
	if err != nil || n != 3 {
		t.Fatalf("λ write: %d %v", n, err)
	}
	after := make([]byte, 1<<20)
	_, _ = v.ReadAt(after, 0)
	off := 64*512 + 1024
	want := append([]byte("zyx"), make([]byte, 509)...)
	if !bytes.Equal(after[off:off+512], want) {
		t.Fatal("λ write output not where it was named")
	}
	copy(before[off:off+512], want)
	if !bytes.Equal(before, after) {
		t.Fatal("λ write touched bytes outside its block")
	}
	if _, _, err := e.LambdaWrite(context.Background(), v, &chain{}, &Request{Files: []File{file}, StartOffset: 3584, StartLength: 1024}); !errors.Is(err, ErrOutsideFile) {
		t.Fatalf("λ write past the file: %v", err)
	}
	// A λ read range outside the file is refused before a sandbox is
	// sized by it (here it would ask for a 4 GiB input).
	for _, r := range []struct{ off, n uint64 }{{0, 1<<32 - 1}, {3584, 1024}, {1 << 63, 1}} {
		c := &chain{}
		_, err := e.LambdaRead(context.Background(), v, c, &Request{Files: []File{file}, StartOffset: r.off, StartLength: uint32(r.n)}, 100)
		if !errors.Is(err, ErrOutsideFile) || c.acquired != 0 {
			t.Fatalf("λ read of [%d, +%d): %v, %d instances acquired", r.off, r.n, err, c.acquired)
		}
	}
}

// TestPushdownCancelled: a request whose context ends stops at the next
// step, however many more its function would ask for, and says why.
func TestPushdownCancelled(t *testing.T) {
	v, f := chainDevice(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	steps := 0
	c := &chain{misbehave: "forever", onStep: func() {
		if steps++; steps == 3 {
			cancel()
		}
	}}
	res, err := (&Executor{Limits: sandbox.Limits{MaxSteps: 1000}}).Pushdown(ctx, v, c, &Request{Files: []File{f}, StartLength: 512})
	if !errors.Is(err, context.Canceled) || res.Steps != 3 || res.Reads != 3 {
		t.Fatalf("got %v after %d steps and %d reads, want context.Canceled after 3", err, res.Steps, res.Reads)
	}
}

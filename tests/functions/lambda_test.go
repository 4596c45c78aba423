package functions_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testfuncs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// TestLambdaRead: stats64, grep and knn run at the target on data read
// from a file scattered over the namespace (the parameters prepended as
// their headers), in both runtimes, and return exactly what the native Go
// references compute from the same bytes.
func TestLambdaRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{limits: generous})
	rng := rand.New(rand.NewPCG(5, 6))
	ctx := context.Background()

	// stats64 over 40000 u64s in extents of 3 blocks.
	nums := u64s(rng, 40000)
	numsFile := place(t, e.ns, nums, extentPlan{lbas: seq(30000, 400, 5), blocks: []uint32{3}})

	// grep over 3000 rows of text, not a whole number of blocks.
	var text bytes.Buffer
	words := []string{"alpha", "beta", "gamma", "needle", "delta", "haystack"}
	for i := range 3000 {
		fmt.Fprintf(&text, "%d", i)
		for range rng.IntN(6) {
			text.WriteString(" " + words[rng.IntN(len(words))])
		}
		text.WriteByte('\n')
	}
	text.WriteString("last row without newline needle")
	textFile := place(t, e.ns, text.Bytes(), extentPlan{lbas: seq(5000, 200, 11), blocks: []uint32{9}})

	// knn: 2000 vectors of 12 dimensions.
	target, vecs := testfuncs.KNN(rng, 12, 2000)
	vecFile := place(t, e.ns, vecs, extentPlan{lbas: seq(25000, 200, 4), blocks: []uint32{2}})

	type call struct {
		name   string
		file   pushdown.File
		params []byte
		data   []byte
		outCap int
	}
	calls := []call{
		{"stats64", numsFile, nil, nums, functions.StatsSize},
		{"grep", textFile, functions.EncodeGrep([]byte("needle"), nil), text.Bytes(), text.Len() + 1},
		{"grep", textFile, functions.EncodeGrep([]byte("no such word"), nil), text.Bytes(), 64},
		{"knn", vecFile, functions.EncodeKNN(target), vecs, 8 * 2000},
	}
	for _, kind := range kinds {
		t.Run(kind.String(), func(t *testing.T) {
			for _, c := range calls {
				fn := e.load(c.name, kind)
				res, err := e.ns.LambdaRead(ctx, fn, []pushdown.File{c.file}, host.Start{Length: uint32(c.file.Size)}, c.params, c.outCap)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				want := testfuncs.Native(t, c.name, append(bytes.Clone(c.params), c.data...), c.outCap)
				if !bytes.Equal(res.Output, want) {
					t.Errorf("%s: %d bytes of output differ from the native reference's %d", c.name, len(res.Output), len(want))
				}
				if res.BytesRead != c.file.Size || int(res.Reads) != len(c.file.Extents) || res.Steps != 1 || !res.Done {
					t.Errorf("%s: result reports %d reads of %d bytes, %d steps, done %v; want %d reads of %d bytes, 1 step, done",
						c.name, res.Reads, res.BytesRead, res.Steps, res.Done, len(c.file.Extents), c.file.Size)
				}
			}
			// A sub-range of a file: u64s 1000 to 2999 of the stats file.
			fn := e.load("stats64", kind)
			res, err := e.ns.LambdaRead(ctx, fn, []pushdown.File{numsFile}, host.Start{Offset: 8000, Length: 16000}, nil, functions.StatsSize)
			if err != nil {
				t.Fatal(err)
			}
			if want := testfuncs.Native(t, "stats64", nums[8000:24000], 32); !bytes.Equal(res.Output, want) {
				t.Errorf("stats64 of a sub-range: %x, want %x", res.Output, want)
			}
			// The function's own error comes back with its code: an
			// output buffer too small for grep's rows.
			g := e.load("grep", kind)
			_, err = e.ns.LambdaRead(ctx, g, []pushdown.File{textFile}, host.Start{Length: uint32(textFile.Size)}, functions.EncodeGrep(nil, nil), 100)
			var fe *host.FunctionError
			if !errors.As(err, &fe) || fe.Code != functions.ERANGE || !errors.Is(err, sandbox.ErrFunction) {
				t.Errorf("grep into 100 bytes: %v, want a FunctionError with code %d", err, functions.ERANGE)
			}
		})
	}
}

// seq returns n values from start, step apart.
func seq(start uint64, n int, step uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = start + uint64(i)*step
	}
	return out
}

// TestLambdaWrite: bitmap expands run-length-encoded input at the target
// and writes the bitmap into the range the request names, in a file whose
// range crosses an extent boundary, in both runtimes. The bytes written
// match the native reference, padded with zeroes to a block, and not one
// byte outside them changes: not before or after the range, not in the
// part of the range the output did not reach, not around the extents. An
// output longer than the range fails and writes nothing.
func TestLambdaWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{limits: generous})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	vol := e.vols[0]
	// The file: 3 blocks at LBA 20000, 5 blocks at LBA 20100.
	file := pushdown.File{Size: 8 * bs, Extents: []pushdown.Extent{{LBA: 20000, Blocks: 3}, {LBA: 20100, Blocks: 5}}}
	// The request's range: file bytes [512, 3584), blocks 1 to 6.
	start := host.Start{Offset: bs, Length: 6 * bs}
	around := []access{{off: 19990 * bs, n: 20 * bs}, {off: 20090 * bs, n: 20 * bs}}

	for _, kind := range kinds {
		t.Run(kind.String(), func(t *testing.T) {
			fn := e.load("bitmap", kind)
			for _, tc := range []struct {
				name  string
				nbits int
			}{
				{"short output", 2000*8 - 3},          // 2000 bytes: blocks 1-4 written, 5-6 untouched
				{"whole range", 6 * bs * 8},           // exactly the range
				{"one byte", 5},                       // one block
				{"big input", 6*bs*8 - 1},             // R2T: the runs do not fit in the capsule
				{"longer than the range", 6*bs*8 + 1}, // the function refuses: NS_ERANGE
			} {
				for _, a := range around {
					stamp(t, vol, a.off, a.n)
				}
				bitmap := make([]byte, (tc.nbits+7)/8)
				for i := range bitmap {
					if tc.name == "big input" {
						bitmap[i] = byte(rng.Uint32()) // short runs: a long input
					} else if rng.IntN(3) == 0 {
						bitmap[i] = 0xff
					}
				}
				runs := functions.EncodeBitmap(bitmap, tc.nbits)
				if tc.name == "big input" && len(runs) <= 16<<10 {
					t.Fatalf("big input is only %d bytes", len(runs))
				}
				vol.record()
				n, err := e.ns.LambdaWrite(ctx, fn, []pushdown.File{file}, start, nil, runs)
				acc := vol.accesses()
				for _, a := range acc {
					if !a.write {
						t.Errorf("%s: λ write read %d bytes at %d", tc.name, a.n, a.off)
					}
				}
				if tc.nbits > 6*bs*8 {
					var fe *host.FunctionError
					if !errors.As(err, &fe) || fe.Code != functions.ERANGE {
						t.Errorf("%s: %v, want the function's NS_ERANGE", tc.name, err)
					}
					if len(acc) != 0 {
						t.Errorf("%s: a failed λ write wrote %v", tc.name, acc)
					}
					for _, a := range around {
						checkStamp(t, vol, a.off, a.n)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				want, _ := functions.BitmapExpand(runs)
				if n != len(want) {
					t.Errorf("%s: wrote %d bytes, want %d", tc.name, n, len(want))
				}
				// The written blocks: the output, then zeroes to a block.
				wblocks := (len(want) + bs - 1) / bs
				padded := make([]byte, wblocks*bs)
				copy(padded, want)
				if got := readFile(t, vol, file); !bytes.Equal(got[bs:bs+wblocks*bs], padded) {
					t.Errorf("%s: the namespace does not hold the native expansion padded with zeroes", tc.name)
				}
				// Everything else, in the range and around it, kept its stamp.
				written := fileRangeSpans(file, bs, int64(wblocks)*bs)
				for _, a := range acc {
					if !within(a, written) {
						t.Errorf("%s: wrote %d bytes at %d, outside the blocks the output covers", tc.name, a.n, a.off)
					}
				}
				for _, a := range around {
					checkStamp(t, vol, a.off, a.n, written...)
				}
			}
		})
	}
}

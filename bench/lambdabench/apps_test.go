package lambdabench

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/functions"
)

func TestPlanLambdaRequests(t *testing.T) {
	for _, tc := range []struct {
		size       int64
		req, align int
		want       []lambdaReq
		bad        bool
	}{
		{size: 8192, req: 4096, align: 4096, want: []lambdaReq{{0, 4096}, {4096, 4096}}},
		{size: 12288, req: 8192, align: 4096, want: []lambdaReq{{0, 8192}, {8192, 4096}}},
		{size: 4096, req: 1 << 20, align: 4096, want: []lambdaReq{{0, 4096}}},
		{size: 640, req: 256, align: 64, want: []lambdaReq{{0, 256}, {256, 256}, {512, 128}}},
		{size: 4095, req: 4096, align: 4096, bad: true},
		{size: 8192, req: 1000, align: 4096, bad: true},
		{size: 0, req: 4096, align: 4096, bad: true},
		{size: 8192, req: 0, align: 4096, bad: true},
	} {
		got, err := planLambdaRequests(tc.size, tc.req, tc.align)
		if tc.bad {
			if err == nil {
				t.Errorf("plan(%d, %d, %d) = %v, want an error", tc.size, tc.req, tc.align, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("plan(%d, %d, %d) = %v, %v; want %v", tc.size, tc.req, tc.align, got, err, tc.want)
		}
	}
}

// runNative runs the app's native function over each request of data, as
// mode B would, and combines the outputs.
func runNative(t *testing.T, app *lambdaApp, data []byte, reqs []lambdaReq) string {
	t.Helper()
	fn := functions.Native(app.function)
	c := app.newCombiner()
	for _, q := range reqs {
		in := append(slices.Clip(app.params), data[q.off:q.off+int64(q.n)]...)
		out := make([]byte, app.outCap(q.n))
		k, err := fn(in, out)
		if err != nil {
			t.Fatalf("%s [%d, +%d): %v", app.name, q.off, q.n, err)
		}
		if err := c.add(q.off, q.n, out[:k]); err != nil {
			t.Fatalf("%s [%d, +%d): %v", app.name, q.off, q.n, err)
		}
	}
	return c.result()
}

// TestLambdaAppsCombineToReference: for every read application, the
// requests' outputs combined equal the native reference over the whole
// dataset, whatever the request size (one block, a few, the whole file).
func TestLambdaAppsCombineToReference(t *testing.T) {
	const size = 40 * lambdaBlock
	for _, name := range []string{"stats64", "stats32", "knn", "grep"} {
		app, err := lookupLambdaApp(name)
		if err != nil {
			t.Fatal(err)
		}
		data := app.generate(size, 7)
		if len(data) != size {
			t.Fatalf("%s: generated %d bytes, want %d", name, len(data), size)
		}
		want, err := app.reference(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, req := range []int{lambdaBlock, 3 * lambdaBlock, 16 * lambdaBlock, size} {
			reqs, err := planLambdaRequests(size, req, lambdaBlock)
			if err != nil {
				t.Fatal(err)
			}
			if got := runNative(t, app, data, reqs); got != want {
				t.Errorf("%s, requests of %d: combined %q, reference %q", name, req, got, want)
			}
		}
		// A changed byte changes the answer: the comparison can fail.
		bad := slices.Clone(data)
		bad[size/2] ^= 0x40
		if name == "grep" {
			// Break a matching line's pattern.
			i := bytes.Index(bad, []byte(LambdaGrepPattern))
			bad[i] = 'Z'
		}
		reqs, _ := planLambdaRequests(size, 4*lambdaBlock, lambdaBlock)
		if got := runNative(t, app, bad, reqs); got == want {
			t.Errorf("%s: a changed dataset still gives the reference %q", name, want)
		}
	}
}

func TestLambdaAppDeterministic(t *testing.T) {
	for _, name := range Apps() {
		app, err := lookupLambdaApp(name)
		if err != nil {
			t.Fatal(err)
		}
		a, b, c := app.generate(8*lambdaBlock, 3), app.generate(8*lambdaBlock, 3), app.generate(8*lambdaBlock, 4)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the same seed made different datasets", name)
		}
		if bytes.Equal(a, c) {
			t.Errorf("%s: different seeds made the same dataset", name)
		}
	}
	if _, err := lookupLambdaApp("sort"); err == nil {
		t.Error("lookupLambdaApp(sort) succeeded")
	}
}

// TestGenText: lines end at every block boundary, and about one in
// lambdaGrepEvery holds the pattern.
func TestGenText(t *testing.T) {
	const size = 256 * lambdaBlock
	text := genText(size, 1)
	for off := lambdaBlock - 1; off < size; off += lambdaBlock {
		if text[off] != '\n' {
			t.Fatalf("byte %d, a block's last, is %q, not a newline", off, text[off])
		}
	}
	lines := bytes.Count(text, []byte{'\n'})
	matches, err := functions.Grep(functions.EncodeGrep([]byte(LambdaGrepPattern), text))
	if err != nil {
		t.Fatal(err)
	}
	m := bytes.Count(matches, []byte{'\n'})
	if m < lines/(3*lambdaGrepEvery) || m > 3*lines/lambdaGrepEvery {
		t.Errorf("%d of %d lines match, want about 1 in %d", m, lines, lambdaGrepEvery)
	}
	for _, w := range lambdaWords {
		if strings.Contains(w, LambdaGrepPattern) {
			t.Errorf("word %q contains the pattern", w)
		}
	}
}

// TestGrepCombinerBoundaries: matching lines at both edges of a request
// boundary are each found once, in order.
func TestGrepCombinerBoundaries(t *testing.T) {
	line := func(n int, s string) []byte { // a line of n bytes with its newline
		b := bytes.Repeat([]byte("x"), n-1)
		copy(b[len(b)-len(s):], s)
		return append(b, '\n')
	}
	var text []byte
	text = append(text, line(100, "")...)
	text = append(text, line(lambdaBlock-100, "zyzzyva")...) // ends the first block
	text = append(text, line(50, "zyzzyva end")...)          // starts the second
	text = append(text, line(lambdaBlock-50, "")...)
	app, err := lookupLambdaApp("grep")
	if err != nil {
		t.Fatal(err)
	}
	want, err := app.reference(text)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(want, "2 matching lines") {
		t.Fatalf("reference %q, want 2 matching lines", want)
	}
	reqs, _ := planLambdaRequests(int64(len(text)), lambdaBlock, lambdaBlock)
	if got := runNative(t, app, text, reqs); got != want {
		t.Errorf("combined %q, reference %q", got, want)
	}
	c := newGrepCombiner()
	if err := c.add(0, 10, []byte("no newline")); err == nil {
		t.Error("an output not ending a line was taken")
	}
}

func TestStatsCombiner(t *testing.T) {
	enc := func(s functions.Stats) []byte { b, _ := s.AppendBinary(nil); return b }
	for _, tc := range []struct {
		name string
		in   []functions.Stats
		want functions.Stats
	}{
		{"none", nil, functions.Stats{}},
		{"empty requests", []functions.Stats{{}, {}}, functions.Stats{}},
		{"one", []functions.Stats{{Count: 2, Sum: 7, Min: 3, Max: 4}}, functions.Stats{Count: 2, Sum: 7, Min: 3, Max: 4}},
		{"empty first", []functions.Stats{{}, {Count: 1, Sum: 9, Min: 9, Max: 9}, {Count: 2, Sum: 3, Min: 1, Max: 2}},
			functions.Stats{Count: 3, Sum: 12, Min: 1, Max: 9}},
		{"sum wraps", []functions.Stats{{Count: 1, Sum: 1 << 63, Min: 1 << 63, Max: 1 << 63}, {Count: 1, Sum: 1 << 63, Min: 1 << 63, Max: 1 << 63}},
			functions.Stats{Count: 2, Sum: 0, Min: 1 << 63, Max: 1 << 63}},
	} {
		c := &statsCombiner{}
		for _, s := range tc.in {
			if err := c.add(0, 0, enc(s)); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.result(); got != statsString(tc.want) {
			t.Errorf("%s: %s, want %s", tc.name, got, statsString(tc.want))
		}
	}
	if err := (&statsCombiner{}).add(0, 0, make([]byte, 31)); err == nil {
		t.Error("a short stats output was taken")
	}
}

func TestKNNCombiner(t *testing.T) {
	const vec = 4 * lambdaKNNDim
	out := func(d ...uint64) []byte {
		var b []byte
		for _, x := range d {
			b = binary.LittleEndian.AppendUint64(b, x)
		}
		return b
	}
	c := newKNNCombiner(3)
	// Request 0: vectors 0..3; request 1: vectors 4..7. The nearest are
	// split across them; the tie at 5 goes to the lower index.
	if err := c.add(0, 4*vec, out(9, 5, 100, 7)); err != nil {
		t.Fatal(err)
	}
	if err := c.add(4*vec, 4*vec, out(5, 1, 50, 6)); err != nil {
		t.Fatal(err)
	}
	want := "8 vectors, distance sum 183 (mod 2^64), 3 nearest #5:1 #1:5 #4:5"
	if got := c.result(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := c.add(8*vec, 2*vec, out(1)); err == nil {
		t.Error("an output of the wrong length was taken")
	}
	if err := c.add(vec/2, vec, out(1)); err == nil {
		t.Error("a request not on a vector boundary was taken")
	}
}

// TestBitmapRequests: each request's run-length encoding expands to its
// part of the bitmap, runs crossing request boundaries included, and all
// of them together to the whole bitmap.
func TestBitmapRequests(t *testing.T) {
	const size = 12 * lambdaBlock
	bm := genBitmap(size, 5)
	if bytes.Count(bm, []byte{0}) == size || bytes.Count(bm, []byte{0xff}) == size {
		t.Fatal("the bitmap is uniform")
	}
	for _, req := range []int{lambdaBlock, 5 * lambdaBlock, size} {
		reqs, _ := planLambdaRequests(size, req, lambdaBlock)
		ins := encodeBitmapRequests(bm, reqs)
		for i, q := range reqs {
			out := make([]byte, q.n)
			k, err := functions.Native("bitmap")(ins[i], out)
			if err != nil || k != q.n {
				t.Fatalf("request %d: %d bytes, %v", i, k, err)
			}
			if !bytes.Equal(out, bm[q.off:q.off+int64(q.n)]) {
				t.Fatalf("request %d expands to other bytes", i)
			}
		}
		ref, err := bitmapReference(ins)
		if err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(ref, bm); i >= 0 {
			t.Fatalf("requests of %d: the reference differs at byte %d", req, i)
		}
	}
}

func TestFirstDiff(t *testing.T) {
	a := bytes.Repeat([]byte{1}, 10000)
	for _, tc := range []struct {
		b    func() []byte
		want int
	}{
		{func() []byte { return slices.Clone(a) }, -1},
		{func() []byte { b := slices.Clone(a); b[9000] = 2; return b }, 9000},
		{func() []byte { b := slices.Clone(a); b[0] = 2; return b }, 0},
		{func() []byte { return a[:5000] }, 5000},
	} {
		if got := firstDiff(a, tc.b()); got != tc.want {
			t.Errorf("firstDiff = %d, want %d", got, tc.want)
		}
	}
}

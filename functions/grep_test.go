package functions

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testruntime"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/wasm"
)

// grepReference is grep's definition, row by row: the oracle for the
// whole-text scans of grep.c and computeGrep.
func grepReference(pat, text []byte) []byte {
	var out []byte
	for len(text) > 0 {
		row, rest, _ := bytes.Cut(text, []byte{'\n'})
		if bytes.Contains(row, pat) {
			out = append(append(out, row...), '\n')
		}
		text = rest
	}
	return out
}

// grepModules loads grep in both runtimes and in wazero's interpreter,
// which must run the SIMD build too (sandbox/wasm falls back to it where
// wazero has no compiler).
func grepModules(t *testing.T) map[string]sandbox.Module {
	t.Helper()
	ctx := context.Background()
	interp, err := wasm.NewRuntime(ctx, wasm.Options{Interpreter: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = interp.Close(ctx) })
	lim := sandbox.Limits{Time: 20 * time.Second}
	mods := map[string]sandbox.Module{"wasm interpreter": load(t, interp, "grep", lim)}
	for _, rt := range testruntime.Both(t) {
		mods[rt.Kind().String()] = load(t, rt, "grep", lim)
	}
	return mods
}

// grepEdgeCases are inputs where a whole-text scan could go wrong: row
// boundaries next to matches, patterns across rows, the runtimes' block
// sizes and their tails.
func grepEdgeCases() []struct{ name, pat, text string } {
	long := strings.Repeat("x", 200)
	cases := []struct{ name, pat, text string }{
		{"match at row start", "ab", "abxxxxxxxxxxxxxxxxxxxxxx\nxxxx\n"},
		{"match at row end", "ab", "xxxx\nxxxxxxxxxxxxxxxxxxxxxxab\nxxxx\n"},
		{"match is the row", "ab", "xx\nab\nxx\n"},
		{"match at text start", "ab", "ab"},
		{"match at text end", "ab", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxab"},
		{"pattern across newline", "ab", "xxxxxxxxxxxxxxxxxxxa\nbxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"},
		{"pattern with newline", "a\nb", "xxxxxxxxxxxxxxxxxxxa\nbxxxxxxxxxxxxxxxxxxxxxxxxx\n"},
		{"pattern is newline", "\n", "a\n\nb\n"},
		{"pattern longer than row", "abcdefgh", "abcdefg\nbcdefgh\nabcdefgh\n"},
		{"pattern longer than text", "abcdefgh", "abc"},
		{"pattern equals text", "abcdefgh", "abcdefgh"},
		{"empty rows", "a", "\n\n\na\n\n\n"},
		{"empty rows, empty pattern", "", "\n\n\na\n\n\n"},
		{"only newlines, empty pattern", "", "\n\n"},
		{"no final newline", "z", "aaa\nzzz"},
		{"no final newline, empty pattern", "", "aaa\nzzz"},
		{"text is one newline", "a", "\n"},
		{"length 1", "q", "qqq\nwww\nwqw\nwwq\nqww\n"},
		{"length 2", "qq", "q q\nqq\n qq\nq\nq"},
		{"length 16", "0123456789abcdef", long + "0123456789abcdef\n" + long + "0123456789abcdeF\n"},
		{"length 17", "0123456789abcdefg", long + "0123456789abcdefg\n" + "0123456789abcdef\ng" + long + "\n"},
		{"length 40", strings.Repeat("ab", 20), strings.Repeat("ab", 19) + "a\n" + strings.Repeat("ab", 21) + "\n"},
		{"first and last bytes only", "abbbbbbbbz", "axxxxxxxxz abbbbbbbbb az abbbbbbbbz\n"},
		{"many matches in a row", "a", strings.Repeat("a", 300) + "\n" + strings.Repeat("a", 5)},
		{"overlapping candidates", "aab", strings.Repeat("a", 100) + "b\n" + strings.Repeat("a", 100) + "\n"},
		{"same first and last byte", "abca", "abcabca\nabc\nbca\n"},
		{"pattern of newline-adjacent bytes", "b\n", "ab\nb\n"},
	}
	// A match in every position of the last partial blocks of a scan,
	// for each width a runtime uses (8 for the scalar scan, 16, 64 and
	// 1024 and 2048 for wasm's SIMD one).
	for _, size := range []int{7, 8, 9, 15, 16, 17, 63, 64, 65, 79, 80, 81, 1023, 1024, 1025, 1039, 1040, 1041, 1087, 1088, 1089, 2047, 2048, 2049, 3071, 3072, 3073} {
		for _, m := range []int{1, 2, 3, 16, 17} {
			pat := strings.Repeat("p", m)
			for pos := max(0, size-20-m); pos+m <= size; pos++ {
				text := []byte(strings.Repeat("y", size))
				copy(text[pos:], pat)
				cases = append(cases, struct{ name, pat, text string }{
					fmt.Sprintf("tail %d/len %d/at %d", size, m, pos), pat, string(text),
				})
			}
		}
	}
	// wasm screens 2 KiB and 1 KiB blocks for the pattern's rarest byte
	// (here q, in text of the common e) at its distance from the match:
	// a match in every position around a block's end, with q first, in
	// the middle or last.
	for _, pat := range []string{"qee", "eqe", "eeq", "qeeeeeeeeeeeeeeeee", "eeeeeeeeqeeeeeeeee", "eeeeeeeeeeeeeeeeeq"} {
		for _, end := range []int{1024, 2048, 3072} {
			for pos := end - len(pat) - 2; pos <= end+2; pos++ {
				text := []byte(strings.Repeat("e", 4200))
				copy(text[pos:], pat)
				text[1500] = '\n'
				cases = append(cases, struct{ name, pat, text string }{
					fmt.Sprintf("rare byte/%s/at %d", pat, pos), pat, string(text),
				})
			}
		}
	}
	return cases
}

// TestGrepEdgeCases runs grep natively and in the runtimes on the edge
// cases, each with an output capacity of exactly the output and of one
// byte less (NS_ERANGE), and compares with the row-by-row reference.
func TestGrepEdgeCases(t *testing.T) {
	ctx := context.Background()
	type run struct {
		name string
		fn   func(in []byte, outCap int) ([]byte, error)
	}
	runs := []run{{"native", func(in []byte, outCap int) ([]byte, error) {
		out := make([]byte, outCap)
		n, err := computeGrep(in, out)
		return out[:max(n, 0)], err
	}}}
	for name, m := range grepModules(t) {
		runs = append(runs, run{name, func(in []byte, outCap int) ([]byte, error) {
			return sandbox.Compute(ctx, m, in, outCap)
		}})
	}
	for _, c := range grepEdgeCases() {
		want := grepReference([]byte(c.pat), []byte(c.text))
		in := EncodeGrep([]byte(c.pat), []byte(c.text))
		for _, r := range runs {
			got, err := r.fn(in, len(want))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %s: grep %q in %q = %q, %v; want %q", r.name, c.name, c.pat, c.text, got, err, want)
			}
			if len(want) == 0 {
				continue
			}
			if _, err := r.fn(in, len(want)-1); code(err) != ERANGE {
				t.Errorf("%s: %s: out_cap one byte short: err %v, want NS_ERANGE", r.name, c.name, err)
			}
		}
	}
}

// TestGrepRandom compares native grep and the runtimes with the
// row-by-row reference on random texts: small alphabets, where matches,
// near misses and newlines are dense, and rows of random length with
// patterns of up to 40 bytes cut from the text (so that they occur, in
// rows or across them).
func TestGrepRandom(t *testing.T) {
	ctx := context.Background()
	mods := grepModules(t)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 1500 {
		var text, pat []byte
		if i%2 == 0 {
			alpha := []string{"ab\n", "abc \n", "aaaab\n\n"}[r.IntN(3)]
			text = make([]byte, r.IntN(1200))
			for j := range text {
				text[j] = alpha[r.IntN(len(alpha))]
			}
			pat = make([]byte, r.IntN(6))
			for j := range pat {
				pat[j] = alpha[r.IntN(len(alpha))]
			}
		} else {
			for len(text) < 2000 {
				for range r.IntN(100) {
					text = append(text, byte('a'+r.IntN(4)))
				}
				text = append(text, '\n')
			}
			text = text[:r.IntN(len(text))]
			if len(text) > 0 {
				at := r.IntN(len(text))
				pat = text[at:min(len(text), at+r.IntN(41))]
			}
		}
		want := grepReference(pat, text)
		in := EncodeGrep(pat, text)
		got, err := Grep(in)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("case %d: native: grep %q in %q = %q, %v; want %q", i, pat, text, got, err, want)
		}
		for name, m := range mods {
			got, err := sandbox.Compute(ctx, m, in, len(want))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("case %d: %s: grep %q in %q = %q, %v; want %q", i, name, pat, text, got, err, want)
			}
		}
	}
}

// grepBenchText makes about size bytes of text: rows of 60 to 120 bytes
// of English-like words, one row in a hundred holding each of the
// benchmark patterns (which no word contains).
func grepBenchText(size int) []byte {
	words := strings.Fields(`the storage of data near the compute engine
		between every host and target there are network queues reading
		and writing pages blocks extents files inodes journals entries
		commits requests responses kernels users sandboxes modules
		functions runtimes memories volumes namespaces devices offload
		pushdown filters projections aggregates scans indexes trees leaves`)
	r := rand.New(rand.NewPCG(7, 11))
	b := make([]byte, 0, size+200)
	for len(b) < size {
		want := 60 + r.IntN(61)
		start := len(b)
		insert := ""
		switch r.IntN(100) {
		case 0:
			insert = "zyzzyva"
		case 1:
			insert = "eviction"
		}
		for n := 0; len(b)-start < want; n++ {
			w := words[r.IntN(len(words))]
			if insert != "" && n == 2 {
				w = insert
			}
			if len(b) > start {
				b = append(b, ' ')
			}
			b = append(b, w...)
		}
		b = append(b, '\n')
	}
	return b
}

// BenchmarkGrep compares native Go with both runtimes on 1 MiB of text,
// one row in a hundred matching "zyzzyva", which starts with a rare byte,
// and another "eviction", which starts with the commonest one (and ends
// with a common one); and "e", which nearly every row holds.
func BenchmarkGrep(b *testing.B) {
	text := grepBenchText(1 << 20)
	for _, pat := range []string{"zyzzyva", "eviction", "e"} {
		in := EncodeGrep([]byte(pat), text)
		want := grepReference([]byte(pat), text)
		b.Run(pat, func(b *testing.B) {
			b.Run("native", func(b *testing.B) {
				out := make([]byte, len(want))
				b.SetBytes(int64(len(in)))
				for b.Loop() {
					if n, err := computeGrep(in, out); err != nil || n != len(want) {
						b.Fatal(n, err)
					}
				}
			})
			for _, rt := range testruntime.Both(b) {
				b.Run(rt.Kind().String(), func(b *testing.B) {
					ctx := context.Background()
					lim := sandbox.Limits{Time: 10 * time.Second, MaxInstructions: 1 << 40, MaxBackJumps: 1 << 40}
					m, err := rt.Load(ctx, must(Module("grep", rt.Kind())), lim)
					if err != nil {
						b.Fatal(err)
					}
					defer m.Close(ctx)
					if got, err := sandbox.Compute(ctx, m, in, len(want)); err != nil || !bytes.Equal(got, want) {
						b.Fatalf("output differs from the reference (%d bytes, want %d): %v", len(got), len(want), err)
					}
					inst, err := m.Acquire(ctx)
					if err != nil {
						b.Fatal(err)
					}
					defer inst.Release()
					ib, err := inst.Input(len(in))
					if err != nil {
						b.Fatal(err)
					}
					copy(ib, in)
					if _, err := inst.Output(len(want)); err != nil {
						b.Fatal(err)
					}
					b.SetBytes(int64(len(in)))
					for b.Loop() {
						if n, err := inst.Compute(ctx, len(in), len(want)); err != nil || n != len(want) {
							b.Fatal(n, err)
						}
					}
				})
			}
		})
	}
}

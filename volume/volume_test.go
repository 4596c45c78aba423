package volume

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// testBackend describes a backend for the tests that run against all of
// them. spec gets a fresh temporary directory and the volume size.
type testBackend struct {
	name string
	spec func(dir string, size int64) string
	// reopen reports whether closing and reopening keeps the data.
	reopen bool
}

// fastSim is a sim spec whose model costs almost no wall time, so data
// tests can run many operations through the sim code path.
const fastSimQuery = "?read_lat=1us&write_lat=1us&iops=0&bw=0"

func testBackends() []testBackend {
	return []testBackend{
		{name: "mem", spec: func(_ string, size int64) string { return fmt.Sprintf("mem:%d", size) }},
		{name: "mem-bs4096", spec: func(_ string, size int64) string { return fmt.Sprintf("mem:%d?bs=4096", size) }},
		{name: "sim-nand", spec: func(_ string, size int64) string { return fmt.Sprintf("sim:nand:%d", size) }},
		{name: "sim-optane-fast", spec: func(_ string, size int64) string { return fmt.Sprintf("sim:optane:%d%s", size, fastSimQuery) }},
		{name: "file", reopen: true, spec: func(dir string, size int64) string {
			return fmt.Sprintf("file:%s?size=%d", filepath.Join(dir, "vol.img"), size)
		}},
		{name: "file-direct", reopen: true, spec: func(dir string, size int64) string {
			return fmt.Sprintf("file:%s?size=%d&direct=1", filepath.Join(dir, "vol.img"), size)
		}},
		{name: "file-direct-bs4096", reopen: true, spec: func(dir string, size int64) string {
			return fmt.Sprintf("file:%s?size=%d&direct=1&bs=4096", filepath.Join(dir, "vol.img"), size)
		}},
	}
}

// openTest opens spec, skipping the test if it asks for O_DIRECT where the
// platform or file system cannot do it, and closes it at the end.
func openTest(t testing.TB, spec string, opts ...Option) Volume {
	t.Helper()
	v, err := Open(spec, opts...)
	if err != nil {
		if strings.Contains(spec, "direct=1") && (!directSupported || errors.Is(err, fs.ErrInvalid) || strings.Contains(err.Error(), "invalid argument")) {
			t.Skipf("O_DIRECT unavailable here (%v)", err)
		}
		t.Fatalf("Open(%q): %v", spec, err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// randBuf returns n random bytes, sometimes in an aligned buffer and
// usually in one that starts at an odd address, so both direct I/O paths
// are exercised.
func randBuf(rng *rand.Rand, n int) []byte {
	var b []byte
	if rng.IntN(3) == 0 {
		b = alignedBuf(n, 4096)
	} else {
		k := rng.IntN(64)
		b = make([]byte, n+k)[k : k+n]
	}
	// Random bytes with a period of 8191 (a prime, so no block-sized shift
	// maps the pattern onto itself), each period stamped with its index:
	// filling megabytes byte by byte dominates the run time under -race.
	const period = 8191
	var w [8]byte
	for i := 0; i < min(len(b), period); i += 8 {
		binary.LittleEndian.PutUint64(w[:], rng.Uint64())
		copy(b[i:min(len(b), period)], w[:])
	}
	for i := period; i < len(b); i += period {
		copy(b[i:], b[:period])
		binary.LittleEndian.PutUint32(w[:], uint32(i/period)^rng.Uint32())
		copy(b[i:], w[:4])
	}
	return b
}

func readAll(t testing.TB, v Volume) []byte {
	t.Helper()
	b := make([]byte, v.Size())
	if n, err := v.ReadAt(b, 0); err != nil || n != len(b) {
		t.Fatalf("ReadAt(all) = %d, %v", n, err)
	}
	return b
}

func TestOpenSpecs(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.img")
	if err := os.WriteFile(existing, make([]byte, 10000), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec string
		size int64
		bs   int
	}{
		{"mem:1GiB", 1 << 30, 512},
		{"mem:64MiB", 64 << 20, 512},
		{"mem:512M", 512 << 20, 512},
		{"mem:1PiB", 1 << 50, 512}, // thin: costs 8 MiB of table
		{"mem:1048576", 1 << 20, 512},
		{"mem:4MiB?bs=4096", 4 << 20, 4096},
		{"mem:4MiB?bs=4k", 4 << 20, 4096},
		{"sim:nand:1GiB", 1 << 30, 512},
		{"sim:optane:16MiB?bs=4096", 16 << 20, 4096},
		{"sim:nand:1GiB?read_lat=90us&write_lat=20us&iops=700000&bw=3.2GB/s", 1 << 30, 512},
		{"file:" + filepath.Join(dir, "a.img") + "?size=1MiB", 1 << 20, 512},
		{"file:" + filepath.Join(dir, "b.img") + "?size=8M&bs=4096&direct=0", 8 << 20, 4096},
		{"file:" + existing, 9728, 512}, // rounded down to whole blocks
	} {
		v, err := Open(tc.spec)
		if err != nil {
			t.Errorf("Open(%q): %v", tc.spec, err)
			continue
		}
		if v.Size() != tc.size || v.BlockSize() != tc.bs || v.String() != tc.spec {
			t.Errorf("Open(%q) = size %d bs %d %q; want size %d bs %d", tc.spec, v.Size(), v.BlockSize(), v.String(), tc.size, tc.bs)
		}
		if err := v.Close(); err != nil {
			t.Errorf("Close(%q): %v", tc.spec, err)
		}
	}
}

func TestOpenBadSpecs(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ spec, why string }{
		{"", "missing ':'"},
		{"mem", "missing ':'"},
		{"tape:1G", `unknown kind "tape"`},
		{"mem:", "missing size"},
		{"mem:0", "must be positive"},
		{"mem:-1", "want a number"},
		{"mem:1X", "unknown unit"},
		{"mem:1000", "not a multiple of the block size 512"},
		{"mem:1MB", "not a multiple of the block size 512"},
		{"mem:1E", "exceeds the 1 PiB limit"},
		{"mem:1M?bs=1000", "not a power of two"},
		{"mem:1M?bs=256", "not a power of two"},
		{"mem:1M?bs=128k", "not a power of two"},
		{"mem:1M?bs=big", "bs: bad size"},
		{"mem:1M?foo=1", `unknown query parameter "foo"`},
		{"mem:1M?size=1M", `unknown query parameter "size"`},
		{"mem:1M?bs=512&bs=512", "given twice"},
		{"mem:1M?", "empty query"},
		{"mem:1M?bs", "not key=value"},
		{"mem:1M?=5", "not key=value"},
		{"sim:1G", "want sim:nand:SIZE"},
		{"sim:ssd:1G", `unknown sim profile "ssd"`},
		{"sim:nand:", "missing size"},
		{"sim:nand:1G?read_lat=fast", "read_lat"},
		{"sim:nand:1G?write_lat=-1us", "write_lat"},
		{"sim:nand:1G?iops=-5", "iops"},
		{"sim:nand:1G?bw=fast", "bw"},
		{"sim:nand:1G?direct=1", `unknown query parameter "direct"`},
		{"file:", "missing path"},
		{"file:?size=1M", "missing path"},
		{"file:" + filepath.Join(dir, "x") + "?size=1M&direct=maybe", "not a boolean"},
		{"file:" + filepath.Join(dir, "x") + "?size=1000", "not a multiple of the block size"},
		{"file:" + filepath.Join(dir, "x") + "?size=0", "must be positive"},
		{"file:" + filepath.Join(dir, "x") + "?size=1M&bs=3k", "not a power of two"},
		{"file:" + filepath.Join(dir, "x") + "?sise=1M", `unknown query parameter "sise"`},
		{"dev:", "missing device path"},
		{"dev:" + regular, "not a block device"},
		{"dev:" + regular + "?size=1G", `unknown query parameter "size"`},
	} {
		v, err := Open(tc.spec)
		if err == nil {
			v.Close()
			t.Errorf("Open(%q) succeeded; want error containing %q", tc.spec, tc.why)
			continue
		}
		prefix := fmt.Sprintf("volume: bad spec %q: ", tc.spec)
		if !errors.Is(err, ErrBadSpec) || !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("Open(%q) = %v; want ErrBadSpec with prefix %q containing %q", tc.spec, err, prefix, tc.why)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a rejected spec created its file: %v", err)
	}
}

func TestFileSizeRules(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vol.img")

	// Absent file and no size: refuse rather than guess.
	_, err := Open("file:" + path)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "add ?size=") {
		t.Fatalf("Open(absent, no size) = %v; want ErrNotExist with a hint", err)
	}

	// Created at the requested size, sparse.
	v, err := Open("file:" + path + "?size=1MiB")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt([]byte("hello"), 1<<20-5); err != nil {
		t.Fatal(err)
	}
	v.Close()
	if st, err := os.Stat(path); err != nil || st.Size() != 1<<20 {
		t.Fatalf("file size after create = %v, %v", st, err)
	}

	// Existing size is used when none is given.
	v, err = Open("file:" + path)
	if err != nil || v.Size() != 1<<20 {
		t.Fatalf("reopen = %v, %v", v, err)
	}
	v.Close()

	// Extended (data kept) and truncated when a size is given.
	v, err = Open("file:" + path + "?size=2MiB")
	if err != nil || v.Size() != 2<<20 {
		t.Fatalf("extend = %v, %v", v, err)
	}
	got := make([]byte, 5)
	if _, err := v.ReadAt(got, 1<<20-5); err != nil || string(got) != "hello" {
		t.Fatalf("after extend read %q, %v", got, err)
	}
	v.Close()
	v, err = Open("file:" + path + "?size=4096")
	if err != nil || v.Size() != 4096 {
		t.Fatalf("truncate = %v, %v", v, err)
	}
	v.Close()
	if st, _ := os.Stat(path); st.Size() != 4096 {
		t.Fatalf("file size after truncate = %d", st.Size())
	}

	// Smaller than a block and no size: refuse.
	tiny := filepath.Join(dir, "tiny.img")
	if err := os.WriteFile(tiny, make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open("file:" + tiny); err == nil || !strings.Contains(err.Error(), "smaller than one") {
		t.Fatalf("Open(tiny) = %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	const size = 2 << 20
	for _, b := range testBackends() {
		t.Run(b.name, func(t *testing.T) {
			spec := b.spec(t.TempDir(), size)
			v := openTest(t, spec)
			rng := rand.New(rand.NewPCG(1, 2))
			for _, tc := range []struct{ off, n int64 }{
				{0, 4096}, {4096, 512}, {1, 3}, {511, 2}, {1<<20 - 7, 14}, {size - 4096, 4096},
				{size - 1, 1}, {12345, 300000}, {0, 0}, {size, 0},
			} {
				want := randBuf(rng, int(tc.n))
				if n, err := v.WriteAt(want, tc.off); err != nil || n != len(want) {
					t.Fatalf("WriteAt(off %d, len %d) = %d, %v", tc.off, tc.n, n, err)
				}
				got := randBuf(rng, int(tc.n))
				if n, err := v.ReadAt(got, tc.off); err != nil || n != len(got) {
					t.Fatalf("ReadAt(off %d, len %d) = %d, %v", tc.off, tc.n, n, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("off %d len %d: read back differs", tc.off, tc.n)
				}
			}
			// Never-written space reads as zeroes.
			got := make([]byte, 1000)
			if _, err := v.ReadAt(got, 1<<20+100000); err != nil || !bytes.Equal(got, make([]byte, 1000)) {
				t.Fatalf("unwritten read = %v, nonzero data", err)
			}
			if err := v.Flush(); err != nil {
				t.Fatalf("Flush: %v", err)
			}
		})
	}
}

func TestOutOfRange(t *testing.T) {
	const size = 1 << 20
	for _, b := range testBackends() {
		t.Run(b.name, func(t *testing.T) {
			v := openTest(t, b.spec(t.TempDir(), size))
			last := []byte{0x5a}
			if _, err := v.WriteAt(last, size-1); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct{ off, n int64 }{
				{-1, 1}, {-4096, 4096}, {size - 1, 2}, {size, 1}, {size + 4096, 4096}, {math.MaxInt64, 1},
				{math.MaxInt64 - 10, 4096}, {math.MinInt64, 1}, {size - 4096, 8192},
			} {
				buf := bytes.Repeat([]byte{0xff}, int(tc.n))
				if n, err := v.WriteAt(buf, tc.off); n != 0 || !errors.Is(err, ErrOutOfRange) {
					t.Errorf("WriteAt(%d, %d) = %d, %v; want ErrOutOfRange", tc.off, tc.n, n, err)
				}
				if n, err := v.ReadAt(buf, tc.off); n != 0 || !errors.Is(err, ErrOutOfRange) {
					t.Errorf("ReadAt(%d, %d) = %d, %v; want ErrOutOfRange", tc.off, tc.n, n, err)
				}
				if err := v.WriteZeroes(tc.off, tc.n); !errors.Is(err, ErrOutOfRange) {
					t.Errorf("WriteZeroes(%d, %d) = %v; want ErrOutOfRange", tc.off, tc.n, err)
				}
				if err := v.Deallocate(tc.off, tc.n); !errors.Is(err, ErrOutOfRange) {
					t.Errorf("Deallocate(%d, %d) = %v; want ErrOutOfRange", tc.off, tc.n, err)
				}
			}
			if err := v.WriteZeroes(0, -1); !errors.Is(err, ErrOutOfRange) {
				t.Errorf("WriteZeroes(0, -1) = %v", err)
			}
			// Nothing was written, in particular not the in-range part of
			// the straddling writes.
			got := make([]byte, 4096)
			if _, err := v.ReadAt(got, size-4096); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 4096)
			want[4095] = 0x5a
			if !bytes.Equal(got, want) {
				t.Errorf("an out-of-range write changed the last block")
			}
		})
	}
}

func TestZeroesAndDeallocate(t *testing.T) {
	const size = 3 << 20
	for _, b := range testBackends() {
		t.Run(b.name, func(t *testing.T) {
			v := openTest(t, b.spec(t.TempDir(), size))
			rng := rand.New(rand.NewPCG(3, 4))
			for i, tc := range []struct {
				dealloc bool
				off, n  int64
			}{
				{false, 1000, 5000},
				{true, 3, 1<<20 + 17},
				{false, 0, 4096},
				{true, 4096, 8192},
				{true, 1 << 20, 1 << 20}, // a whole mem chunk
				{false, 1<<20 - 1, 2},
				{true, size - 1, 1},
				{false, 0, size},
				{true, 0, 0},
			} {
				model := randBuf(rng, size)
				if _, err := v.WriteAt(model, 0); err != nil {
					t.Fatal(err)
				}
				var err error
				if tc.dealloc {
					err = v.Deallocate(tc.off, tc.n)
				} else {
					err = v.WriteZeroes(tc.off, tc.n)
				}
				if err != nil {
					t.Fatalf("case %d: %v", i, err)
				}
				clear(model[tc.off : tc.off+tc.n])
				if got := readAll(t, v); !bytes.Equal(got, model) {
					t.Fatalf("case %d (dealloc %v off %d n %d): first difference at %d", i, tc.dealloc, tc.off, tc.n, firstDiff(got, model))
				}
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestModelRandomOps runs random operations, many unaligned in offset,
// length and buffer address, against each backend and a plain []byte, and
// requires them to agree throughout and after reopening.
func TestModelRandomOps(t *testing.T) {
	const size = 3 << 20
	for _, b := range testBackends() {
		t.Run(b.name, func(t *testing.T) {
			ops := 400
			if b.name == "sim-nand" {
				ops = 150 // 90 µs per command adds up
			}
			dir := t.TempDir()
			spec := b.spec(dir, size)
			v := openTest(t, spec)
			model := make([]byte, size)
			runModel(t, v, model, rand.New(rand.NewPCG(5, 6)), ops)
			if !b.reopen {
				return
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			v = openTest(t, strings.Replace(spec, fmt.Sprintf("size=%d", size), "size="+FormatSize(size), 1))
			if got := readAll(t, v); !bytes.Equal(got, model) {
				t.Fatalf("after reopen: first difference at %d", firstDiff(got, model))
			}
		})
	}
}

// runModel applies ops random operations to v and model and checks reads.
func runModel(t testing.TB, v Volume, model []byte, rng *rand.Rand, ops int) {
	t.Helper()
	size := int64(len(model))
	randRange := func() (int64, int64) {
		var n int64
		switch rng.IntN(10) {
		case 0:
			n = rng.Int64N(700 << 10) // crosses bounce windows and mem chunks
		case 1, 2:
			n = 512 * rng.Int64N(17)
		default:
			n = rng.Int64N(9000)
		}
		n = min(n, size)
		off := rng.Int64N(size - n + 1)
		if rng.IntN(3) == 0 {
			off = alignDown(off, 512)
		}
		return off, n
	}
	for i := range ops {
		off, n := randRange()
		switch op := rng.IntN(10); {
		case op < 4:
			p := randBuf(rng, int(n))
			if _, err := v.WriteAt(p, off); err != nil {
				t.Fatalf("op %d WriteAt(%d, %d): %v", i, off, n, err)
			}
			copy(model[off:], p)
		case op < 8:
			p := randBuf(rng, int(n))
			if _, err := v.ReadAt(p, off); err != nil {
				t.Fatalf("op %d ReadAt(%d, %d): %v", i, off, n, err)
			}
			if !bytes.Equal(p, model[off:off+n]) {
				t.Fatalf("op %d ReadAt(%d, %d): first difference at +%d", i, off, n, firstDiff(p, model[off:off+n]))
			}
		case op == 8:
			if err := v.WriteZeroes(off, n); err != nil {
				t.Fatalf("op %d WriteZeroes(%d, %d): %v", i, off, n, err)
			}
			clear(model[off : off+n])
		default:
			if err := v.Deallocate(off, n); err != nil {
				t.Fatalf("op %d Deallocate(%d, %d): %v", i, off, n, err)
			}
			clear(model[off : off+n])
		}
		if i%100 == 99 {
			if err := v.Flush(); err != nil {
				t.Fatalf("Flush: %v", err)
			}
		}
	}
	if got := readAll(t, v); !bytes.Equal(got, model) {
		t.Fatalf("final contents: first difference at %d", firstDiff(got, model))
	}
}

// TestConcurrentWriters has goroutines own interleaved 100-byte regions, so
// on direct volumes they constantly read-modify-write the same blocks, and
// near a mem chunk boundary. Each region must end up holding its owner's
// last write: a lost update shows up as a stale or foreign pattern. Readers
// run alongside for the race detector.
func TestConcurrentWriters(t *testing.T) {
	const (
		size    = 2 << 20
		writers = 8
		regions = 128
		regLen  = 100
		iters   = 300
	)
	bases := []int64{0, 1<<20 - regions*regLen/2}
	for _, b := range testBackends() {
		if b.name == "sim-nand" {
			continue // same code as sim-optane-fast, just slower
		}
		t.Run(b.name, func(t *testing.T) {
			v := openTest(t, b.spec(t.TempDir(), size))
			regionOff := func(r int) int64 { return bases[r/regions] + int64(r%regions)*regLen }
			last := make([][]byte, 2*regions)
			var wg sync.WaitGroup
			for g := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					for it := range iters {
						r := g + writers*rng.IntN(2*regions/writers)
						// Nonzero, distinct per writer and per iteration.
						p := bytes.Repeat([]byte{byte(g<<5 | (it%31 + 1))}, regLen)
						if _, err := v.WriteAt(p, regionOff(r)); err != nil {
							t.Errorf("WriteAt: %v", err)
							return
						}
						last[r] = p // regions are owned by one goroutine
					}
				}()
			}
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, 8192)
					for i := range iters {
						if _, err := v.ReadAt(buf, int64(i%3)*(1<<20-4096)); err != nil {
							t.Errorf("ReadAt: %v", err)
							return
						}
					}
				}()
			}
			wg.Wait()
			for r := range last {
				got := make([]byte, regLen)
				if _, err := v.ReadAt(got, regionOff(r)); err != nil {
					t.Fatal(err)
				}
				want := last[r]
				if want == nil {
					want = make([]byte, regLen)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("region %d at %d: got %x..., want %x...", r, regionOff(r), got[:4], want[:4])
				}
			}
		})
	}
}

func TestClosed(t *testing.T) {
	for _, b := range testBackends() {
		t.Run(b.name, func(t *testing.T) {
			v := openTest(t, b.spec(t.TempDir(), 1<<20))
			if _, err := v.WriteAt([]byte{1}, 0); err != nil {
				t.Fatal(err)
			}
			if err := v.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			buf := make([]byte, 512)
			if _, err := v.ReadAt(buf, 0); !errors.Is(err, ErrClosed) {
				t.Errorf("ReadAt after Close = %v", err)
			}
			if _, err := v.WriteAt(buf, 0); !errors.Is(err, ErrClosed) {
				t.Errorf("WriteAt after Close = %v", err)
			}
			if err := v.WriteZeroes(0, 512); !errors.Is(err, ErrClosed) {
				t.Errorf("WriteZeroes after Close = %v", err)
			}
			if err := v.Deallocate(0, 512); !errors.Is(err, ErrClosed) {
				t.Errorf("Deallocate after Close = %v", err)
			}
			if err := v.Flush(); !errors.Is(err, ErrClosed) {
				t.Errorf("Flush after Close = %v", err)
			}
			if err := v.Close(); !errors.Is(err, ErrClosed) {
				t.Errorf("second Close = %v", err)
			}
		})
	}
}

func TestMemLazyAllocation(t *testing.T) {
	v := openTest(t, "mem:1GiB").(*memVolume)
	if got := v.allocated(); got != 0 {
		t.Fatalf("fresh 1 GiB volume allocated %d bytes", got)
	}
	if _, err := v.WriteAt([]byte{1}, 500<<20+3); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4<<20)
	if _, err := v.ReadAt(buf, 100<<20); err != nil {
		t.Fatal(err)
	}
	if got := v.allocated(); got != memChunkSize {
		t.Fatalf("after one write allocated %d bytes; want one chunk", got)
	}
	if err := v.WriteZeroes(500<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	if got := v.allocated(); got != 0 {
		t.Fatalf("after zeroing the chunk allocated %d bytes", got)
	}

	small := openTest(t, "mem:4KiB").(*memVolume)
	if _, err := small.WriteAt([]byte{1}, 4095); err != nil {
		t.Fatal(err)
	}
	if got := small.allocated(); got != 4096 {
		t.Fatalf("4 KiB volume allocated %d bytes", got)
	}
}

func TestStripesFor(t *testing.T) {
	const region = 1 << stripeShift
	for _, tc := range []struct {
		off, end int64
		want     stripeSpan
	}{
		{0, 1, stripeSpan{0, 0}},
		{0, region, stripeSpan{0, 0}},
		{region - 1, region + 1, stripeSpan{0, 1}},
		{63 * region, 65 * region, stripeSpan{63, 0}}, // wraps
		{5 * region, 5*region + nStripes*region, stripeSpan{0, nStripes - 1}},
		{0, 1 << 40, stripeSpan{0, nStripes - 1}},
	} {
		if got := stripesFor(tc.off, tc.end); got != tc.want {
			t.Errorf("stripesFor(%d, %d) = %v; want %v", tc.off, tc.end, got, tc.want)
		}
	}
	wrap := stripeSpan{62, 1}
	for i, want := range map[int]bool{0: true, 1: true, 2: false, 61: false, 62: true, 63: true} {
		if wrap.has(i) != want {
			t.Errorf("%v.has(%d) = %v", wrap, i, !want)
		}
	}
}

func TestAlignedBuf(t *testing.T) {
	for _, a := range []int{512, 4096} {
		for _, n := range []int{1, 4096, 100000} {
			b := alignedBuf(n, a)
			if len(b) != n || cap(b) != n {
				t.Errorf("alignedBuf(%d, %d) has len %d cap %d", n, a, len(b), cap(b))
			}
			if addr := uintptr(unsafe.Pointer(&b[0])); addr%uintptr(a) != 0 {
				t.Errorf("alignedBuf(%d, %d) starts at %#x", n, a, addr)
			}
		}
	}
}

func TestWaitUntilNeverEarly(t *testing.T) {
	// Only the lower bound is deterministic: waitUntil must not return
	// before its deadline. How late it is belongs to the benchmarks.
	waitUntil(time.Now().Add(-time.Second))
	for _, d := range []time.Duration{0, 10 * time.Microsecond, 150 * time.Microsecond, 600 * time.Microsecond} {
		deadline := time.Now().Add(d)
		waitUntil(deadline)
		if now := time.Now(); now.Before(deadline) {
			t.Errorf("waitUntil(+%v) returned %v early", d, deadline.Sub(now))
		}
	}
}

// TestCloseWhileBusy closes volumes under concurrent I/O: every command must
// either succeed or fail with ErrClosed, and nothing may panic or race.
func TestCloseWhileBusy(t *testing.T) {
	for _, b := range testBackends() {
		if b.name == "sim-nand" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			v := openTest(t, b.spec(t.TempDir(), 4<<20))
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 11))
					buf := make([]byte, 5000)
					for i := range 200 {
						off := rng.Int64N(4<<20 - 5000)
						var err error
						switch i % 4 {
						case 0:
							_, err = v.WriteAt(buf, off)
						case 1:
							_, err = v.ReadAt(buf, off)
						case 2:
							err = v.Deallocate(alignDown(off, 1<<20), 1<<20)
						default:
							err = v.WriteZeroes(off, 5000)
						}
						if err != nil && !errors.Is(err, ErrClosed) {
							t.Errorf("op %d: %v", i, err)
							return
						}
					}
				}()
			}
			time.Sleep(time.Millisecond)
			if err := v.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			wg.Wait()
		})
	}
}

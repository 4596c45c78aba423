package lambda

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/internal/metricstest"
	"github.com/nearstore/nearstore/internal/testfuncs"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
)

// readCase is a λ read application: its parameters, file bytes and
// output capacity.
type readCase struct {
	fn     string
	params []byte
	data   []byte
	outCap int
}

func readCases(rng *rand.Rand) []readCase {
	nums := make([]byte, 200<<10) // 25600 u64s, not a whole number of pages
	for i := 0; i < len(nums); i += 8 {
		binary.LittleEndian.PutUint64(nums[i:], rng.Uint64()>>rng.IntN(64))
	}
	var text bytes.Buffer
	words := []string{"alpha", "beta", "needle", "gamma", "haystack"}
	for i := 0; text.Len() < 150<<10; i++ {
		fmt.Fprintf(&text, "%d", i)
		for range rng.IntN(6) {
			text.WriteString(" " + words[rng.IntN(len(words))])
		}
		text.WriteByte('\n')
	}
	tgt, vecs := testfuncs.KNN(rng, 16, 3000)
	return []readCase{
		{"stats64", nil, nums, functions.StatsSize},
		{"grep", functions.EncodeGrep([]byte("needle"), nil), text.Bytes(), text.Len() + 1},
		{"knn", functions.EncodeKNN(tgt), vecs, 8 * 3000},
	}
}

// TestReadModesAgree: every mode gives the native function's output on
// the same bytes, cold and warm, and mode T ran at the target.
func TestReadModesAgree(t *testing.T) {
	e := newEnv(t, envConfig{profileEvery: 4, profileFirst: 2})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, rc := range readCases(rng) {
		f := e.file(rc.fn, rc.data)
		want := testfuncs.Native(t, rc.fn, concat(rc.params, rc.data), rc.outCap)
		// A range starting and ending inside pages, too.
		off, n := int64(3*devBS), len(rc.data)-5*devBS
		if rc.fn == "stats64" {
			n -= n % 8
		}
		if rc.fn == "knn" {
			off, n = 0, len(rc.data)/2 // whole vectors
		}
		wantPart := testfuncs.Native(t, rc.fn, concat(rc.params, rc.data[off:off+int64(n)]), rc.outCap)
		for _, warm := range []float64{0, 0.5, 1} {
			for _, mode := range []Mode{Buffered, Host, Target, Auto, Auto, Auto} {
				name := fmt.Sprintf("%s/warm=%v/%v", rc.fn, warm, mode)
				if err := e.d.Cache().Drop(ctx); err != nil {
					t.Fatal(err)
				}
				if err := e.d.Cache().Warm(ctx, f, warm, false, 0); err != nil {
					t.Fatal(err)
				}
				before := e.fsys.Stats().Remote
				res, err := e.d.Read(ctx, mode, ReadCall{File: f, Fn: e.fns[rc.fn], Off: 0, N: len(rc.data), Params: rc.params, OutCap: rc.outCap})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !bytes.Equal(res.Output, want) {
					t.Errorf("%s: output differs from native (%d bytes, want %d)", name, len(res.Output), len(want))
				}
				if mode == Target {
					if e.fsys.Stats().Remote != before+1 || res.TargetMicros == 0 {
						t.Errorf("%s: did not run at the target (remote %d -> %d, target time %d µs)",
							name, before, e.fsys.Stats().Remote, res.TargetMicros)
					}
				}
				res, err = e.d.Read(ctx, mode, ReadCall{File: f, Fn: e.fns[rc.fn], Off: off, N: n, Params: rc.params, OutCap: rc.outCap})
				if err != nil {
					t.Fatalf("%s part: %v", name, err)
				}
				if !bytes.Equal(res.Output, wantPart) {
					t.Errorf("%s part: output differs from native", name)
				}
			}
		}
	}
	st := e.d.Stats()
	if st.Ran[Host] == 0 || st.Ran[Target] == 0 || st.Ran[Buffered] == 0 || st.Ran[Auto] != 0 {
		t.Errorf("Ran = %v: want every side used and no Auto", st.Ran)
	}
	if len(st.Models) != 3 {
		t.Errorf("%d models, want one per (file, function): 3", len(st.Models))
	}
}

// TestProfileRacesAgree: both sides of profiled reads finish (the loser
// is cancelled, but its output, when it gets that far, equals the
// winner's); checked by running both sides separately on every
// application and comparing, and by profiling every request.
func TestProfileRacesAgree(t *testing.T) {
	e := newEnv(t, envConfig{profileEvery: 1, profileFirst: 1})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, rc := range readCases(rng) {
		f := e.file(rc.fn, rc.data)
		k, err := e.d.Read(ctx, Host, ReadCall{File: f, Fn: e.fns[rc.fn], Off: 0, N: len(rc.data), Params: rc.params, OutCap: rc.outCap})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := e.d.Read(ctx, Target, ReadCall{File: f, Fn: e.fns[rc.fn], Off: 0, N: len(rc.data), Params: rc.params, OutCap: rc.outCap})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(k.Output, tr.Output) {
			t.Fatalf("%s: K and T outputs differ", rc.fn)
		}
		for range 4 {
			res, err := e.d.Read(ctx, Auto, ReadCall{File: f, Fn: e.fns[rc.fn], Off: 0, N: len(rc.data), Params: rc.params, OutCap: rc.outCap})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(res.Output, k.Output) {
				t.Errorf("%s: profiled output differs", rc.fn)
			}
		}
	}
	if got := e.d.Stats().Profiled; got != 12 {
		t.Errorf("Profiled = %d, want 12", got)
	}
}

// TestWriteModesAgree: bitmap λ writes in every mode leave the same file
// contents: the expanded bitmap, zero-padded to whole device blocks, and
// the file grown to the range's end.
func TestWriteModesAgree(t *testing.T) {
	e := newEnv(t, envConfig{profileEvery: 3, profileFirst: 1})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	const nbits = 1<<18 + 77
	bm := make([]byte, (nbits+7)/8)
	for i := 0; i < nbits; {
		run := 1 + rng.IntN(5000)
		if rng.IntN(2) == 1 {
			for j := i; j < min(i+run, nbits); j++ {
				bm[j/8] |= 1 << (j % 8)
			}
		}
		i += run
	}
	data := functions.EncodeBitmap(bm, nbits)
	expanded, err := functions.BitmapExpand(data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(expanded, bm) {
		t.Fatal("bitmap reference does not round trip")
	}
	n := (len(expanded) + devBS - 1) / devBS * devBS
	const off = 8 * devBS
	for i, mode := range []Mode{Buffered, Host, Target, Auto, Auto, Auto, Auto} {
		name := fmt.Sprintf("%v#%d", mode, i)
		// A file with old bytes where the write lands, and shorter than
		// the range's end: the write grows it.
		old := bytes.Repeat([]byte{0xa5}, off+n/2)
		f := e.file(fmt.Sprintf("bitmap%d", i), old)
		if err := e.d.Cache().Warm(ctx, f, 1, false, 0); err != nil {
			t.Fatal(err)
		}
		before := e.fsys.Stats().Remote
		k, err := e.d.Write(ctx, mode, WriteCall{File: f, Fn: e.fns["bitmap"], Off: off, N: n, Data: data})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if mode == Target && e.fsys.Stats().Remote != before+1 {
			t.Errorf("%s: did not run at the target", name)
		}
		if k != len(expanded) {
			t.Errorf("%s: wrote %d bytes, want %d", name, k, len(expanded))
		}
		want := make([]byte, off+n)
		copy(want, old[:off])
		copy(want[off:], expanded)
		// Through the cache, then on the file after a flush.
		got := make([]byte, len(want)+10)
		if k, _ := e.d.Cache().ReadAt(ctx, f, got, 0); !bytes.Equal(got[:k], want) {
			t.Errorf("%s: contents through the cache differ (%d bytes, want %d)", name, k, len(want))
		}
		if err := e.d.Cache().Flush(ctx, f, 0, -1); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(contents(t, f), want) {
			t.Errorf("%s: file contents differ", name)
		}
	}
	if e.d.Stats().Ran[Target] == 0 {
		t.Error("no write ran at the target")
	}
}

// TestWriteErrors: an output longer than the range fails and writes
// nothing, in every mode; misaligned ranges are refused.
func TestWriteErrors(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	old := bytes.Repeat([]byte{7}, 8*devBS)
	data := functions.EncodeBitmap(bytes.Repeat([]byte{0xff}, 2*devBS), 16*devBS) // expands to 2 blocks
	for _, mode := range []Mode{Buffered, Host, Target, Auto} {
		f := e.file("err"+mode.String(), old)
		if _, err := e.d.Write(ctx, mode, WriteCall{File: f, Fn: e.fns["bitmap"], Off: 0, N: devBS, Data: data}); err == nil {
			t.Errorf("%v: output longer than the range accepted", mode)
		}
		if _, err := e.d.Write(ctx, mode, WriteCall{File: f, Fn: e.fns["bitmap"], Off: 1, N: 2 * devBS, Data: data}); err == nil {
			t.Errorf("%v: misaligned range accepted", mode)
		}
		if err := e.d.Cache().Flush(ctx, f, 0, -1); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(contents(t, f), old) {
			t.Errorf("%v: a failed write changed the file", mode)
		}
	}
}

// TestReadErrors: out-of-range reads fail alike in every mode; mode B
// needs a native twin; host modes need a registered function.
func TestReadErrors(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	f := e.file("small", make([]byte, 4096))
	for _, mode := range []Mode{Buffered, Host, Target, Auto} {
		_, err := e.d.Read(ctx, mode, ReadCall{File: f, Fn: e.fns["stats64"], Off: 4000, N: 200, OutCap: 32})
		if !errors.Is(err, pushdown.ErrOutsideFile) {
			t.Errorf("%v: read past the end: %v, want ErrOutsideFile", mode, err)
		}
		if _, err := e.d.Read(ctx, mode, ReadCall{File: f, Fn: e.fns["stats64"], Off: -1, N: 8, OutCap: 32}); err == nil {
			t.Errorf("%v: negative offset accepted", mode)
		}
	}
	mod, err := functions.Module("stats32", 1)
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.d.Register(ctx, Function{Name: "stats32", Module: mod})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Read(ctx, Buffered, ReadCall{File: f, Fn: id, Off: 0, N: 64, OutCap: 32}); !errors.Is(err, ErrNoNative) {
		t.Errorf("mode B without native: %v, want ErrNoNative", err)
	}
	if _, err := e.d.Read(ctx, Host, ReadCall{File: f, Fn: [32]byte{1}, Off: 0, N: 64, OutCap: 32}); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("mode K unregistered: %v, want ErrNotRegistered", err)
	}
}

// TestProfileSchedule: with ProfileEvery=10 and ProfileFirst=2, 25 Auto
// requests on one (file, function) profile exactly requests 0, 1, 10,
// 11, 20 and 21.
func TestProfileSchedule(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, envConfig{profileEvery: 10, profileFirst: 2, metrics: NewMetrics(reg)})
	ctx := context.Background()
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	f := e.file("sched", data)
	want := testfuncs.Native(t, "stats64", data, functions.StatsSize)
	for range 25 {
		res, err := e.d.Read(ctx, Auto, ReadCall{File: f, Fn: e.fns["stats64"], Off: 0, N: len(data), OutCap: functions.StatsSize})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(res.Output, want) {
			t.Fatal("output differs")
		}
	}
	st := e.d.Stats()
	// 6 on the schedule; a recheck (the pick changed between profiles,
	// which this small, fast read may do) begins a period early, and a
	// switch's probation brings the next profile closer: each profiles
	// ProfileFirst more at most.
	if extra := st.Rechecks + st.Probations; st.Profiled < 6 || st.Profiled > 6+2*extra || st.Rechecks > 3 {
		t.Errorf("Profiled = %d with %d rechecks and %d probations, want 6 and at most 2 more for each", st.Profiled, st.Rechecks, st.Probations)
	}
	if st.Requests != 25 || st.Ran[Host]+st.Ran[Target] != 25 {
		t.Errorf("Requests = %d, Ran = %v: want 25 calls, each counted once", st.Requests, st.Ran)
	}
	if got := metricstest.Sum(t, reg, "nearstore_lambda_profiles_total", map[string]string{"op": "read"}); got != float64(st.Profiled) {
		t.Errorf("profiles metric %v, want %d", got, st.Profiled)
	}
	k := metricstest.Sum(t, reg, "nearstore_lambda_requests_total", map[string]string{"op": "read", "mode": "lambda", "ran": "K"})
	tr := metricstest.Sum(t, reg, "nearstore_lambda_requests_total", map[string]string{"op": "read", "mode": "lambda", "ran": "T"})
	if k != float64(st.Ran[Host]) || tr != float64(st.Ran[Target]) {
		t.Errorf("requests metric K %v, T %v; Stats.Ran %v", k, tr, st.Ran)
	}
	if len(st.Models) != 1 || st.Models[0].Ino != f.Ino() || st.Models[0].Fn != e.fns["stats64"] || st.Models[0].Samples < 6 {
		t.Errorf("Models = %+v", st.Models)
	}
}

// TestFileCallsBypassDispatcher: a dispatcher does not install itself
// in the file system: File.LambdaRead and LambdaWrite go to the target
// whether or not one exists, and only Dispatcher.Read and Write dispatch.
func TestFileCallsBypassDispatcher(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	data := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 1024)
	f := e.file("direct", data)
	before := e.fsys.Stats().Remote
	res, err := f.LambdaRead(ctx, e.fns["stats64"], 0, len(data), nil, functions.StatsSize)
	if err != nil || !bytes.Equal(res.Output, testfuncs.Native(t, "stats64", data, functions.StatsSize)) {
		t.Fatalf("LambdaRead: %v", err)
	}
	if _, err := f.LambdaWrite(ctx, e.fns["bitmap"], 0, devBS, nil, functions.EncodeBitmap([]byte{0xff}, 8)); err != nil {
		t.Fatal(err)
	}
	if got := e.fsys.Stats().Remote; got != before+2 {
		t.Errorf("file calls ran at the target %d times, want 2", got-before)
	}
	if st := e.d.Stats(); st.Requests != 0 {
		t.Errorf("the dispatcher took %d file calls, want none", st.Requests)
	}
	if _, err := e.d.Read(ctx, Host, ReadCall{File: f, Fn: e.fns["stats64"], Off: 0, N: 8, OutCap: 32}); err != nil {
		t.Fatal(err)
	}
	if st := e.d.Stats(); st.Requests != 1 || st.Ran[Host] != 1 {
		t.Errorf("after a dispatched read: %+v", st)
	}
}

// TestConcurrent runs Auto reads, K writes and T writes on separate
// regions of one file at once, for the race detector, and checks every
// output.
func TestConcurrent(t *testing.T) {
	e := newEnv(t, envConfig{cache: NewCache(256<<10, 4096), profileEvery: 5, profileFirst: 2})
	ctx := context.Background()
	const region = 64 << 10
	data := make([]byte, 4*region)
	for i := range data {
		data[i] = byte(i*13 + i>>9)
	}
	f := e.file("conc", data)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part := data[g*region : (g+1)*region]
			want := testfuncs.Native(t, "stats64", part, functions.StatsSize)
			for range 15 {
				res, err := e.d.Read(ctx, Auto, ReadCall{File: f, Fn: e.fns["stats64"], Off: int64(g * region), N: region, OutCap: functions.StatsSize})
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(res.Output, want) {
					errs <- fmt.Errorf("reader %d: output differs", g)
					return
				}
			}
		}()
	}
	for g, mode := range []Mode{Host, Target} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64((2 + g) * region)
			for i := range 10 {
				bm := bytes.Repeat([]byte{byte(i + 1)}, 1024)
				if _, err := e.d.Write(ctx, mode, WriteCall{File: f, Fn: e.fns["bitmap"], Off: off, N: region, Data: functions.EncodeBitmap(bm, 8*len(bm))}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := e.d.Cache().Flush(ctx, f, 0, -1); err != nil {
		t.Fatal(err)
	}
	got := contents(t, f)
	for g := range 2 {
		off := (2 + g) * region
		want := make([]byte, region)
		copy(want, bytes.Repeat([]byte{10}, 1024))
		copy(want[1024:], data[off+1024:off+region])
		if !bytes.Equal(got[off:off+region], want) {
			t.Errorf("region %d: contents differ", 2+g)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
		ok   bool
	}{
		{"lambda", Auto, true}, {"λ", Auto, true}, {"AUTO", Auto, true},
		{"K", Host, true}, {"host", Host, true},
		{"t", Target, true}, {"Target", Target, true},
		{"B", Buffered, true}, {"buffered", Buffered, true},
		{"x", 0, false}, {"", 0, false},
	} {
		got, err := ParseMode(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseMode(%q) = %v, %v", tc.in, got, err)
		}
		if tc.ok {
			if back, err := ParseMode(got.String()); err != nil || back != got {
				t.Errorf("%v does not round trip through String", got)
			}
		}
	}
	ms, err := ParseModes("B,K, T,lambda")
	if err != nil || fmt.Sprint(ms) != "[B K T lambda]" {
		t.Errorf("ParseModes = %v, %v", ms, err)
	}
	if _, err := ParseModes("B,,K"); err == nil {
		t.Error("ParseModes accepted an empty entry")
	}
}

// gateHandler is a slog handler that holds every "profiled a read"
// record until release is closed: it keeps a profile's losing side (which
// logs before it counts itself out) from finishing.
type gateHandler struct {
	held    chan struct{} // one send per held record
	release chan struct{}
}

func (h gateHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h gateHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "lambda: profiled a read" {
		h.held <- struct{}{}
		<-h.release
	}
	return nil
}
func (h gateHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h gateHandler) WithGroup(string) slog.Handler      { return h }

// TestWaitProfiles: a profiled read returns with its faster side;
// WaitProfiles waits for the slower one, and gives up with ctx.
func TestWaitProfiles(t *testing.T) {
	gate := gateHandler{held: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnv(t, envConfig{profileEvery: 1, profileFirst: 1, logger: slog.New(gate)})
	var once sync.Once
	open := func() { once.Do(func() { close(gate.release) }) }
	t.Cleanup(open) // before the dispatcher's Close, which waits for the loser
	ctx := context.Background()
	rc := readCases(rand.New(rand.NewPCG(5, 6)))[0]
	f := e.file(rc.fn, rc.data)
	if err := e.d.WaitProfiles(ctx); err != nil {
		t.Fatalf("WaitProfiles with nothing running: %v", err)
	}
	if _, err := e.d.Read(ctx, Auto, ReadCall{File: f, Fn: e.fns[rc.fn], Off: 0, N: len(rc.data), Params: rc.params, OutCap: rc.outCap}); err != nil {
		t.Fatal(err)
	}
	<-gate.held // the loser has stopped and is logging
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := e.d.WaitProfiles(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitProfiles with the loser held = %v, want %v", err, context.DeadlineExceeded)
	}
	done := make(chan error, 1)
	go func() { done <- e.d.WaitProfiles(ctx) }()
	open()
	if err := <-done; err != nil {
		t.Fatalf("WaitProfiles after the loser finished: %v", err)
	}
	// A second profile: WaitProfiles returns once it is done as well.
	if _, err := e.d.Read(ctx, Auto, ReadCall{File: f, Fn: e.fns[rc.fn], Off: 0, N: len(rc.data), Params: rc.params, OutCap: rc.outCap}); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, e.d)
}

// TestProfileWritesAlternate: a profile's writes alternate sides, target
// first, each the real write measured alone into its side's estimate, and
// each writes the right bytes (through the host cache on the host's
// turns).
func TestProfileWritesAlternate(t *testing.T) {
	e := newEnv(t, envConfig{profileEvery: 100, profileFirst: 4})
	ctx := context.Background()
	fn := e.fns["bitmap"]
	f := e.file("profiled", nil)
	rng := rand.New(rand.NewPCG(7, 8))
	want := []Mode{Target, Host, Target, Host}
	var bms [][]byte
	for i, side := range want {
		bm := make([]byte, 4*devBS)
		for j := range bm {
			bm[j] = byte(rng.Uint32())
		}
		bms = append(bms, bm)
		data := functions.EncodeBitmap(bm, 8*len(bm))
		before := e.d.Stats().Ran[side]
		k, err := e.d.Write(ctx, Auto, WriteCall{File: f, Fn: fn, Off: int64(i * len(bm)), N: len(bm), Data: data})
		if err != nil {
			t.Fatal(err)
		}
		clear(data) // the caller's again
		if k != len(bm) {
			t.Fatalf("write %d: wrote %d bytes, want %d", i, k, len(bm))
		}
		if got := e.d.Stats().Ran[side]; got != before+1 {
			t.Errorf("write %d ran on %v %d times, want once", i, side, got-before)
		}
		ks := e.d.state(f.Ino(), fn)
		ks.mu.Lock()
		host, target := len(ks.p.est.hostCPU.v), len(ks.p.est.wrTotal.v)
		ks.mu.Unlock()
		if wantHost, wantTarget := (i+1)/2, i/2+1; host != wantHost || target != wantTarget {
			t.Errorf("after write %d: %d host and %d target measurements, want %d and %d", i, host, target, wantHost, wantTarget)
		}
	}
	if err := e.d.Cache().Flush(ctx, f, 0, int64(len(want)*4*devBS)); err != nil {
		t.Fatal(err)
	}
	if got := contents(t, f); !bytes.Equal(got, bytes.Join(bms, nil)) {
		t.Error("file contents differ from the bitmaps written")
	}
	if got := e.d.Stats().Profiled; got != uint64(len(want)) {
		t.Errorf("Profiled = %d, want %d", got, len(want))
	}
}

// TestProfileReadsAlternate: where the model last picked the host, a
// profile's reads alternate sides, host first, each run alone: one
// measurement of one side per read, and no losing run left going. Where
// it picked the target, a profiled read races both sides.
func TestProfileReadsAlternate(t *testing.T) {
	e := newEnv(t, envConfig{profileEvery: 100, profileFirst: 4})
	ctx := context.Background()
	fn := e.fns["stats64"]
	const chunk = 64 << 10
	data := u64s(4 * chunk)
	f := e.file("alternate", data)
	ks := e.d.state(f.Ino(), fn)
	ks.mu.Lock()
	ks.p.last = Host
	ks.mu.Unlock()
	for i, side := range []Mode{Host, Target, Host, Target} {
		off := int64(i * chunk)
		before := e.d.Stats().Ran[side]
		res, err := e.d.Read(ctx, Auto, ReadCall{File: f, Fn: fn, Off: off, N: chunk, OutCap: functions.StatsSize})
		if err != nil {
			t.Fatal(err)
		}
		if want := testfuncs.Native(t, "stats64", data[off:off+chunk], functions.StatsSize); !bytes.Equal(res.Output, want) {
			t.Errorf("read %d: output %x, want %x", i, res.Output, want)
		}
		if err := e.d.WaitProfiles(ctx); err != nil {
			t.Fatal(err)
		}
		if got := e.d.Stats().Ran[side]; got != before+1 {
			t.Errorf("read %d ran on %v %d times, want once", i, side, got-before)
		}
		ks.mu.Lock()
		host, target := len(ks.p.est.hostCPU.v), len(ks.p.est.tgtTotal.v)
		ks.mu.Unlock()
		if wantHost, wantTarget := i/2+1, (i+1)/2; host != wantHost || target != wantTarget {
			t.Errorf("after read %d: %d host and %d target measurements, want %d and %d", i, host, target, wantHost, wantTarget)
		}
	}
	if got := e.d.Stats().Profiled; got != 4 {
		t.Errorf("Profiled = %d, want 4", got)
	}

	// With the target picked last, the next profile's reads race: the
	// target runs, and is measured, whichever side wins (a host loser
	// cancelled before its reads ended is not, so only the target's
	// measurement is certain). The new profile begins with neither side
	// picked since the last, so both sides' windows start empty.
	ks.mu.Lock()
	ks.p.last, ks.p.count = Target, 100
	ks.mu.Unlock()
	if _, err := e.d.Read(ctx, Auto, ReadCall{File: f, Fn: fn, Off: 0, N: chunk, OutCap: functions.StatsSize}); err != nil {
		t.Fatal(err)
	}
	if err := e.d.WaitProfiles(ctx); err != nil {
		t.Fatal(err)
	}
	ks.mu.Lock()
	target := len(ks.p.est.tgtTotal.v)
	ks.mu.Unlock()
	if target != 1 {
		t.Errorf("after a raced read: %d target measurements, want 1", target)
	}

	// A recheck's reads alternate sides, the new pick first.
	ks.mu.Lock()
	ks.p.pick, ks.p.rechecked = Host, 0
	ks.mu.Unlock()
	ks.mu.Lock()
	rechecked := ks.p.recheck(Target, false, false).recheck
	ks.mu.Unlock()
	if !rechecked {
		t.Fatal("a switch to the target was not rechecked")
	}
	for i, side := range []Mode{Target, Host} {
		ks.mu.Lock()
		host, target := len(ks.p.est.hostCPU.v), len(ks.p.est.tgtTotal.v)
		ks.mu.Unlock()
		before := e.d.Stats().Ran[side]
		if _, err := e.d.Read(ctx, Auto, ReadCall{File: f, Fn: fn, Off: 0, N: chunk, OutCap: functions.StatsSize}); err != nil {
			t.Fatal(err)
		}
		if err := e.d.WaitProfiles(ctx); err != nil {
			t.Fatal(err)
		}
		if got := e.d.Stats().Ran[side]; got != before+1 {
			t.Errorf("recheck read %d ran on %v %d times, want once", i, side, got-before)
		}
		ks.mu.Lock()
		dh, dt := len(ks.p.est.hostCPU.v)-host, len(ks.p.est.tgtTotal.v)-target
		ks.mu.Unlock()
		if wantHost := b2i(side == Host); dh != wantHost || dt != 1-wantHost {
			t.Errorf("recheck read %d (%v): %d new host and %d new target measurements", i, side, dh, dt)
		}
	}
}

// TestProfileRaceOrAlone: a profile's reads race only where the host is
// expected to lose by a wide margin. Before a key's first pick they
// alternate sides, host first, where the range is cached, and race where
// it is not; after the model picked the target narrowly they alternate,
// target first. The margin comes from the model's estimates.
func TestProfileRaceOrAlone(t *testing.T) {
	e := newEnv(t, envConfig{profileEvery: 100, profileFirst: 4})
	ctx := context.Background()
	fn := e.fns["stats64"]
	const chunk = 64 << 10
	data := u64s(2 * chunk)
	// read runs one read of f and says where it ran and how many host
	// and target measurements it added.
	read := func(f *offloadfs.File) (ran Mode, host, target int) {
		t.Helper()
		ks := e.d.state(f.Ino(), fn)
		ks.mu.Lock()
		h0, t0 := len(ks.p.est.hostCPU.v), len(ks.p.est.tgtTotal.v)
		ks.mu.Unlock()
		before := e.d.Stats().Ran
		res, err := e.d.Read(ctx, Auto, ReadCall{File: f, Fn: fn, Off: 0, N: chunk, OutCap: functions.StatsSize})
		if err != nil {
			t.Fatal(err)
		}
		if want := testfuncs.Native(t, "stats64", data[:chunk], functions.StatsSize); !bytes.Equal(res.Output, want) {
			t.Errorf("output %x, want %x", res.Output, want)
		}
		if err := e.d.WaitProfiles(ctx); err != nil {
			t.Fatal(err)
		}
		after := e.d.Stats().Ran
		for _, m := range []Mode{Host, Target} {
			if after[m] > before[m] {
				ran = m
			}
		}
		ks.mu.Lock()
		defer ks.mu.Unlock()
		return ran, len(ks.p.est.hostCPU.v) - h0, len(ks.p.est.tgtTotal.v) - t0
	}

	warm := e.file("warm", data)
	if err := e.d.Cache().Warm(ctx, warm, 1, false, 0); err != nil {
		t.Fatal(err)
	}
	for i, want := range []Mode{Host, Target} {
		ran, h, tg := read(warm)
		if ran != want || h != b2i(want == Host) || tg != b2i(want == Target) {
			t.Errorf("cached, first profile, read %d: ran on %v, %d host and %d target measurements; want %v alone", i, ran, h, tg, want)
		}
	}

	// Uncached: a race, in which the target is measured whichever wins.
	cold := e.file("cold", data)
	races := e.d.Stats().Races
	if _, _, tg := read(cold); tg != 1 || e.d.Stats().Races != races+1 {
		t.Errorf("uncached, first profile: %d target measurements, %d races; want 1 and 1", tg, e.d.Stats().Races-races)
	}

	// The target picked by a wide margin: the profile's first read races,
	// the rest run on the target alone.
	ksc := e.d.state(cold.Ino(), fn)
	ksc.mu.Lock()
	ksc.p.last, ksc.p.near, ksc.p.count = Target, false, 100
	ksc.p.est.hostRuns, ksc.p.est.targetRuns = 1, 1
	ksc.mu.Unlock()
	for i := range 4 {
		races := e.d.Stats().Races
		ran, h, tg := read(cold)
		raced := e.d.Stats().Races - races
		if i == 0 {
			if raced != 1 || tg != 1 {
				t.Errorf("after a wide pick of the target, read 0: %d races, %d target measurements; want 1 and 1", raced, tg)
			}
			continue
		}
		if raced != 0 || ran != Target || h != 0 || tg != 1 {
			t.Errorf("after a wide pick of the target, read %d: %d races, ran on %v, %d host and %d target measurements; want T alone", i, raced, ran, h, tg)
		}
	}

	// The target picked narrowly: the next profile alternates, target
	// first. (Both sides ran since the last profile: it keeps their
	// samples.)
	ks := e.d.state(cold.Ino(), fn)
	ks.mu.Lock()
	ks.p.last, ks.p.near, ks.p.count = Target, true, 200
	ks.p.est.hostRuns, ks.p.est.targetRuns = 1, 1
	ks.mu.Unlock()
	for i, want := range []Mode{Target, Host} {
		ran, h, tg := read(cold)
		if ran != want || h != b2i(want == Host) || tg != b2i(want == Target) {
			t.Errorf("after a narrow pick of the target, read %d: ran on %v, %d host and %d target measurements; want %v alone", i, ran, h, tg, want)
		}
	}

	// near is whether the model's estimates were within raceMargin.
	for _, c := range []struct {
		host float64 // the host's compute, seconds per byte; the target takes 1 ns
		near bool
	}{{1.2e-9, true}, {3e-9, false}} {
		ks := e.d.state(warm.Ino(), fn)
		ks.mu.Lock()
		ks.p.est.forget(Host)
		ks.p.est.forget(Target)
		for range windowSize {
			ks.p.est.hostCPU.add(c.host)
			ks.p.est.tgtTotal.add(1e-9)
			ks.p.est.tgtCPU.add(0.5e-9)
		}
		ks.p.count, ks.p.pick, ks.p.last, ks.p.near, ks.p.stale = 50, Target, Target, !c.near, true
		ks.mu.Unlock()
		if ran, _, _ := read(warm); ran != Target {
			t.Fatalf("host %g s/B against the target's 1e-9: ran on %v, want T", c.host, ran)
		}
		ks.mu.Lock()
		near := ks.p.near
		ks.mu.Unlock()
		if near != c.near {
			t.Errorf("host %g s/B against the target's 1e-9: near %v, want %v", c.host, near, c.near)
		}
	}
}

// u64s returns n bytes of little-endian u64s, a different value every 8
// bytes: stats64's input.
func u64s(n int) []byte {
	data := make([]byte, n)
	for i := 0; i < len(data); i += 8 {
		binary.LittleEndian.PutUint64(data[i:], uint64(i)*0x9e3779b97f4a7c15)
	}
	return data
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestWriteRecheck: a λ write whose pick switches sides between profiles
// is profiled instead, as a read's is.
func TestWriteRecheck(t *testing.T) {
	e := newEnv(t, envConfig{profileEvery: 100, profileFirst: 2})
	ctx := context.Background()
	fn := e.fns["bitmap"]
	f := e.file("rechecked", nil)
	ks := e.d.state(f.Ino(), fn)
	// set fills both sides' windows so that side is the faster by far.
	set := func(side Mode) {
		ks.mu.Lock()
		defer ks.mu.Unlock()
		fast, slow := 1e-9, 1e-3
		if side == Target {
			fast, slow = slow, fast
		}
		for range windowSize {
			ks.p.est.hostCPU.add(fast)
			ks.p.est.wrTotal.add(slow)
		}
		ks.p.stale = true
	}
	bm := bytes.Repeat([]byte{0x3c}, devBS)
	write := func(i int) Stats {
		t.Helper()
		if _, err := e.d.Write(ctx, Auto, WriteCall{File: f, Fn: fn, Off: int64(i * devBS), N: devBS, Data: functions.EncodeBitmap(bm, 8*devBS)}); err != nil {
			t.Fatal(err)
		}
		return e.d.Stats()
	}
	for i := range 2 { // the scheduled profile
		write(i)
	}
	set(Host)
	// The key's first pick is confirmed by a recheck, its two writes
	// alternating sides, the host first; then the host runs.
	if st := write(2); st.Rechecks != 1 || st.Profiled != 3 {
		t.Fatalf("the first pick: %d rechecks, %d profiled, want 1 and 3", st.Rechecks, st.Profiled)
	}
	write(3)
	before := e.d.Stats()
	if st := write(4); st.Profiled != before.Profiled || st.Ran[Host] != before.Ran[Host]+1 {
		t.Fatalf("after the recheck, host picked: profiled %d, ran on the host %d, want %d and %d", st.Profiled, st.Ran[Host], before.Profiled, before.Ran[Host]+1)
	}
	// A switch a whole period after that recheck is rechecked too.
	const n = 106
	for i := 5; i < n-1; i++ {
		write(i)
	}
	set(Target)
	before = e.d.Stats()
	if st := write(n - 1); st.Rechecks != 2 || st.Profiled != before.Profiled+1 {
		t.Errorf("a switch to the target: %d rechecks, %d profiled, want 2 and %d", st.Rechecks, st.Profiled, before.Profiled+1)
	}
	if err := e.d.Cache().Flush(ctx, f, 0, n*devBS); err != nil {
		t.Fatal(err)
	}
	if got := contents(t, f); !bytes.Equal(got, bytes.Repeat(bm, n)) {
		t.Error("file contents differ from the bitmaps written")
	}
}

// TestReadAhead: sequential λ reads picked for the target are served
// from reads sent ahead, one or two ranges ahead, with the native
// function's output on the bytes the file holds when the call is made: a
// write to the next range after it was sent ahead, straight to the file
// or into the host cache, or a call with other parameters, is not
// answered from it.
func TestReadAhead(t *testing.T) {
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprintf("ahead=%d", k), func(t *testing.T) { testReadAhead(t, k) })
	}
}

func testReadAhead(t *testing.T, k int) {
	e := newEnv(t, envConfig{profileEvery: 1 << 20, profileFirst: 1, readAhead: k})
	ctx := context.Background()
	rc := readCases(rand.New(rand.NewPCG(7, 8)))[1] // grep
	const chunk = 16 << 10
	data := rc.data[:16*chunk]
	f := e.file(rc.fn, data)
	fn := e.fns[rc.fn]
	// A model that picks the target by far, past its first profile and
	// pick (TestPolicyReadAhead covers how the policy gets there).
	ks := e.d.state(f.Ino(), fn)
	ks.mu.Lock()
	ks.p.fill(1e-3, 1e-9)
	ks.p.last, ks.p.pick, ks.p.count, ks.p.seen, ks.p.rechecked = Target, Target, 1, 1, 1
	ks.mu.Unlock()

	read := func(i int, params []byte) []byte {
		t.Helper()
		res, err := e.d.Read(ctx, Auto, ReadCall{File: f, Fn: fn, Off: int64(i) * chunk, N: chunk, Params: params, OutCap: chunk + 1})
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		return res.Output
	}
	check := func(i int, params []byte) {
		t.Helper()
		got := read(i, params)
		// The file's bytes after the call, which wrote back what the
		// cache held dirty there.
		cur := contents(t, f)[i*chunk : (i+1)*chunk]
		if want := testfuncs.Native(t, rc.fn, concat(params, cur), chunk+1); !bytes.Equal(got, want) {
			t.Errorf("chunk %d: output differs from native on the file's bytes (%d bytes, want %d)", i, len(got), len(want))
		}
	}
	used := func() uint64 { return e.d.Stats().AheadUsed }

	for i := range 4 {
		check(i, rc.params)
	}
	// The second sends k, the next two one each.
	if st := e.d.Stats(); st.AheadSent != uint64(k+2) || st.AheadUsed != 2 || st.Ran[Target] != 4 {
		t.Fatalf("after 4 sequential reads: %d sent ahead, %d used, %v ran; want %d, 2, T 4", st.AheadSent, st.AheadUsed, st.Ran, k+2)
	}

	// Chunk 4 was sent ahead; the file changes under it.
	line := []byte("needle needle needle\n")
	if _, err := f.WriteAt(line, 4*chunk+100); err != nil {
		t.Fatal(err)
	}
	before := used()
	check(4, rc.params)
	if used() != before {
		t.Errorf("chunk 4, written after it was read ahead: answered from the read ahead")
	}

	// Chunk 5 was sent ahead; a write into the host cache dirties it.
	if _, err := e.d.Cache().WriteAt(ctx, f, bytes.Repeat([]byte("needle\n"), devBS/7+1)[:devBS], 5*chunk); err != nil {
		t.Fatal(err)
	}
	before = used()
	check(5, rc.params)
	if used() != before {
		t.Errorf("chunk 5, dirty in the cache after it was read ahead: answered from the read ahead")
	}

	// Chunk 6 was sent ahead for grep's "needle"; the call asks for another pattern.
	before = used()
	check(6, functions.EncodeGrep([]byte("alpha"), nil))
	if used() != before {
		t.Errorf("chunk 6 with other parameters: answered from the read ahead")
	}

	// The rest of the stream: served from reads ahead again, the last
	// one sending nothing past the file's end.
	before = used()
	sent := e.d.Stats().AheadSent
	for i := 7; i < 16; i++ {
		check(i, rc.params)
	}
	if got := used() - before; got != 8 {
		t.Errorf("chunks 7-15: %d answered from reads ahead, want 8 (all but the first, which followed a mismatch)", got)
	}
	if got := e.d.Stats().AheadSent - sent; got != 8 {
		t.Errorf("chunks 7-15: %d sent ahead, want 8 (chunks 8-15: none past the end)", got)
	}
	waitIdle(t, e.d)
}

// waitIdle waits for d's profiles' losing sides and reads ahead
// (WaitProfiles), and checks that none is left running.
func waitIdle(t *testing.T, d *Dispatcher) {
	t.Helper()
	if err := d.WaitProfiles(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.losers != 0 {
		t.Errorf("%d profiles' losing sides or reads ahead running after WaitProfiles", d.losers)
	}
}

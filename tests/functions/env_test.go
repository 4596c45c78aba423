// Package functions_test holds nearstore's end-to-end tests of storage
// functions: a real target with the real wasm and eBPF runtimes, on a
// loopback TCP listener, driven by the real host library (and, in one test,
// by the real CLI binary). They check what issue 3 promises end to end:
// a pushdown costs one command however long its chain; the standard
// functions agree with their native Go references over the wire; hostile
// functions come back as clear errors while the target keeps serving other
// hosts and never touches a byte outside a request's files; and functions
// never block a queue.
package functions_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/metricstest"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testmodules"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

const (
	testNQN = "nqn.2026-11.io.nearstore:functions-e2e"
	// nsSize is the size of each namespace; block size is 512.
	nsSize = 16 << 20
	bs     = 512
)

// kinds are the runtimes every applicable test runs against.
var kinds = []sandbox.Kind{sandbox.KindWasm, sandbox.KindEBPF}

// generous are the limits for tests whose functions must not run into
// them, even on a slow machine under the race detector.
var generous = sandbox.Limits{Time: 10 * time.Second}

// access is one backend read or write.
type access struct {
	off, n int64
	write  bool
}

// tapVolume is a namespace backend that can record every access made to
// it and hold reads of chosen bytes until released, so tests can see
// exactly what the target touched and keep a request in flight for as
// long as they like.
type tapVolume struct {
	volume.Volume

	mu        sync.Mutex
	recording bool
	log       []access
	// gate, if set, is called before every read; it may block.
	gate func(off, n int64)
}

func (v *tapVolume) note(off, n int64, write bool) {
	v.mu.Lock()
	if v.recording {
		v.log = append(v.log, access{off, n, write})
	}
	gate := v.gate
	v.mu.Unlock()
	if gate != nil && !write {
		gate(off, n)
	}
}

func (v *tapVolume) ReadAt(p []byte, off int64) (int, error) {
	v.note(off, int64(len(p)), false)
	return v.Volume.ReadAt(p, off)
}

func (v *tapVolume) WriteAt(p []byte, off int64) (int, error) {
	v.note(off, int64(len(p)), true)
	return v.Volume.WriteAt(p, off)
}

// record starts recording accesses, forgetting earlier ones.
func (v *tapVolume) record() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.recording, v.log = true, nil
}

// accesses stops recording and returns what was recorded.
func (v *tapVolume) accesses() []access {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.recording = false
	return v.log
}

func (v *tapVolume) setGate(g func(off, n int64)) {
	v.mu.Lock()
	v.gate = g
	v.mu.Unlock()
}

// env is a running target with two namespaces of nsSize bytes and a host
// connected to it. Namespace 1 is tapped.
type env struct {
	t    testing.TB
	srv  *target.Server
	addr string
	reg  *prometheus.Registry
	vols []*tapVolume
	ctrl *host.Controller
	ns   *host.Namespace // namespace 1
	ns2  *host.Namespace // namespace 2
}

type envConfig struct {
	limits   sandbox.Limits
	ioQueues int
	// now, if set, is the target's clock for grant leases.
	now func() time.Time
}

func newEnv(t testing.TB, cfg envConfig) *env {
	t.Helper()
	e := &env{t: t}
	for range 2 {
		v, err := volume.Open(fmt.Sprintf("mem:%d", nsSize))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		e.vols = append(e.vols, &tapVolume{Volume: v})
	}
	tt := testtarget.Start(t, testtarget.Config{
		NQN: testNQN, Name: "e2e-0", Volume: e.vols[0], More: []volume.Volume{e.vols[1]},
		Runtimes: func() ([]sandbox.Runtime, error) {
			wrt, err := wasm.NewRuntime(context.Background(), wasm.Options{})
			return []sandbox.Runtime{wrt, ebpf.NewRuntime(ebpf.Options{Logger: slog.New(slog.DiscardHandler)})}, err
		},
		Limits: cfg.limits,
		Now:    cfg.now,
	})
	t.Cleanup(tt.Stop)
	e.srv, e.addr, e.reg = tt.Server(), tt.Addr(), tt.Registry()
	e.ctrl, e.ns = e.connect(1, cfg.ioQueues)
	var err2 error
	if e.ns2, err2 = e.ctrl.Namespace(2); err2 != nil {
		t.Fatal(err2)
	}
	return e
}

// connect connects another host (keep-alive off, so the only commands it
// sends are the test's) and returns its controller and namespace nsid.
func (e *env) connect(nsid uint32, ioQueues int) (*host.Controller, *host.Namespace) {
	e.t.Helper()
	return testhost.Connect(e.t, e.addr, testNQN, nsid, host.Options{IOQueues: ioQueues, KeepAlive: -1})
}

// connectAs connects another host under the given host NQN (keep-alive
// off) and returns its controller and namespace nsid.
func (e *env) connectAs(hostNQN string, nsid uint32) (*host.Controller, *host.Namespace) {
	e.t.Helper()
	return testhost.Connect(e.t, e.addr, testNQN, nsid, host.Options{HostNQN: hostNQN, KeepAlive: -1})
}

// load loads the named standard function of kind.
func (e *env) load(name string, kind sandbox.Kind) sandbox.ID {
	e.t.Helper()
	mod, err := functions.Module(name, kind)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.loadBytes(mod)
}

func (e *env) loadBytes(mod []byte) sandbox.ID {
	e.t.Helper()
	id, err := e.ctrl.LoadFunction(context.Background(), mod)
	if err != nil {
		e.t.Fatalf("load %s: %v", sandbox.IDOf(mod), err)
	}
	return id
}

// readTestdata returns a file of testdata.
func readTestdata(t testing.TB, name string) []byte { return testmodules.Read(t, "testdata", name) }

// hostileModule returns testdata/hostile.c built for kind.
func hostileModule(t testing.TB, kind sandbox.Kind) []byte {
	if kind == sandbox.KindWasm {
		return readTestdata(t, "hostile.wasm")
	}
	return readTestdata(t, "hostile.o")
}

// counter sums the samples of the target metric name whose labels include
// all of want.
func (e *env) counter(name string, want map[string]string) float64 {
	e.t.Helper()
	return metricstest.Sum(e.t, e.reg, name, want)
}

// commandsByOp returns the target's completed commands on a namespace, by
// operation and result ("pushdown/ok", "read/ok", ...).
func (e *env) commandsByOp(nsid uint32) map[string]float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "nearstore_target_commands_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["nsid"] == fmt.Sprint(nsid) {
				out[l["op"]+"/"+l["result"]] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// commandsSince returns the commands the target completed on a namespace
// since before (a commandsByOp snapshot). The target counts a command
// before its completion leaves, so every command the host has seen
// complete is there.
func (e *env) commandsSince(nsid uint32, before map[string]float64) map[string]float64 {
	e.t.Helper()
	return diff(before, e.commandsByOp(nsid))
}

// diff returns after - before, leaving out zero entries.
func diff(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if x := v - before[k]; x != 0 {
			d[k] = x
		}
	}
	for k, v := range before {
		if _, ok := after[k]; !ok {
			d[k] = -v
		}
	}
	return d
}

// extentPlan places a file on a namespace: its bytes are cut into chunks
// of the given block counts (the last one repeats), written at the given
// LBAs in order, so one file can be scattered over the namespace.
type extentPlan struct {
	lbas   []uint64
	blocks []uint32
}

// place writes data through ns as the plan says and returns the file's
// file-table entry.
func place(t testing.TB, ns *host.Namespace, data []byte, p extentPlan) pushdown.File {
	t.Helper()
	f := pushdown.File{Size: uint64(len(data))}
	for i, off := 0, 0; off < len(data); i++ {
		if i >= len(p.lbas) {
			t.Fatalf("extent plan too short for %d bytes", len(data))
		}
		nb := p.blocks[min(i, len(p.blocks)-1)]
		end := min(off+int(nb)*bs, len(data))
		chunk := make([]byte, int(nb)*bs) // zero padded to whole blocks
		copy(chunk, data[off:end])
		if _, err := ns.WriteAt(chunk, int64(p.lbas[i])*bs); err != nil {
			t.Fatal(err)
		}
		f.Extents = append(f.Extents, pushdown.Extent{LBA: p.lbas[i], Blocks: nb})
		off = end
	}
	return f
}

// fileSpans returns the device byte ranges holding bytes [0, f.Size) of f.
func fileSpans(f pushdown.File) []access {
	var out []access
	left := int64(f.Size)
	for _, x := range f.Extents {
		if left <= 0 {
			break
		}
		n := min(int64(x.Blocks)*bs, left)
		out = append(out, access{off: int64(x.LBA) * bs, n: n})
		left -= n
	}
	return out
}

// within reports whether a lies inside one of spans.
func within(a access, spans []access) bool {
	for _, s := range spans {
		if a.off >= s.off && a.off+a.n <= s.off+s.n {
			return true
		}
	}
	return false
}

// stampByte is the byte stamped at a device offset: a function of the
// offset that no test writes by accident.
func stampByte(off int64) byte {
	x := uint64(off) * 0x9E3779B97F4A7C15
	return byte(x>>56) ^ 0x5c
}

// stamp fills [off, off+n) of a backend with the stamp pattern.
func stamp(t testing.TB, v volume.Volume, off, n int64) {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		b[i] = stampByte(off + int64(i))
	}
	if _, err := v.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// checkStamp fails unless [off, off+n) of a backend still holds the stamp,
// except inside skip.
func checkStamp(t testing.TB, v volume.Volume, off, n int64, skip ...access) {
	t.Helper()
	b := make([]byte, n)
	if _, err := v.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i := range b {
		at := off + int64(i)
		if within(access{off: at, n: 1}, skip) {
			continue
		}
		if b[i] != stampByte(at) {
			if bad < 5 {
				t.Errorf("byte %d of the namespace changed: %#02x, stamped %#02x", at, b[i], stampByte(at))
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d stamped bytes changed in all", bad)
	}
}

// background is a second host doing verified I/O on namespace 2 (writes
// read back and compared, and λ reads of stats64 checked against the
// native reference) until stopped, so tests can show the target keeps
// serving everyone while hostile functions run.
type background struct {
	t      testing.TB
	ops    atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	errs   []error
}

func (e *env) startBackground() *background {
	e.t.Helper()
	_, ns := e.connect(2, 2)
	stats := e.load("stats64", sandbox.KindWasm)
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{t: e.t, cancel: cancel, done: make(chan struct{})}
	fail := func(err error) {
		b.mu.Lock()
		b.errs = append(b.errs, err)
		b.mu.Unlock()
	}
	go func() {
		defer close(b.done)
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
		buf := make([]byte, 8*bs)
		got := make([]byte, len(buf))
		for ctx.Err() == nil {
			for i := range buf {
				buf[i] = byte(rng.Uint32())
			}
			off := int64(rng.IntN(nsSize/len(buf))) * int64(len(buf))
			if _, err := ns.WriteAtContext(ctx, buf, off); err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("background write: %w", err))
				}
				return
			}
			if _, err := ns.ReadAtContext(ctx, got, off); err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("background read: %w", err))
				}
				return
			}
			if !bytes.Equal(got, buf) {
				fail(fmt.Errorf("background read at %d returned other bytes than written", off))
				return
			}
			res, err := ns.LambdaRead(ctx, stats, []pushdown.File{ns.RawFile()}, host.Start{Offset: uint64(off), Length: uint32(len(buf))}, nil, functions.StatsSize)
			if err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("background λ read: %w", err))
				}
				return
			}
			want, _ := functions.Stats64(buf)
			if g, err := functions.ParseStats(res.Output); err != nil || g != want {
				fail(fmt.Errorf("background stats64: got %+v (%v), want %+v", g, err, want))
				return
			}
			b.ops.Add(1)
		}
	}()
	e.t.Cleanup(b.stop)
	return b
}

// progress waits until the background host has completed two more rounds
// (so at least one ran entirely after the call), failing the test if it
// stopped or got something wrong.
func (b *background) progress() {
	b.t.Helper()
	start := b.ops.Load()
	deadline := time.Now().Add(30 * time.Second)
	for b.ops.Load() < start+2 {
		select {
		case <-b.done:
			b.check()
			b.t.Fatal("the background host stopped")
		default:
		}
		if time.Now().After(deadline) {
			b.t.Fatal("the background host made no progress in 30 s: the target stopped serving it")
		}
		time.Sleep(time.Millisecond)
	}
	b.check()
}

func (b *background) check() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, err := range b.errs {
		b.t.Error(err)
	}
	b.errs = nil
}

func (b *background) stop() {
	b.cancel()
	<-b.done
	b.check()
}

// u64s returns n little-endian u64s from rng.
func u64s(rng *rand.Rand, n int) []byte {
	b := make([]byte, 0, 8*n)
	for range n {
		b = binary.LittleEndian.AppendUint64(b, rng.Uint64())
	}
	return b
}

// sortedKeys returns n distinct keys, spaced so that absent keys lie
// between them: 10*i + 5 for i in a random subset.
func sortedKeys(rng *rand.Rand, n int) []uint64 {
	keys := make([]uint64, 0, n)
	for i := 0; len(keys) < n; i++ {
		if rng.IntN(4) != 0 {
			keys = append(keys, uint64(10*i+5))
		}
	}
	slices.Sort(keys)
	return keys
}

// readFile reads bytes [0, f.Size) of a file straight from a backend.
func readFile(t testing.TB, v volume.Volume, f pushdown.File) []byte {
	t.Helper()
	var out []byte
	for _, s := range fileSpans(f) {
		b := make([]byte, s.n)
		if _, err := v.ReadAt(b, s.off); err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

// fileRangeSpans returns the device byte ranges holding bytes [off,
// off+n) of f.
func fileRangeSpans(f pushdown.File, off, n int64) []access {
	var out []access
	pos := int64(0)
	for _, x := range f.Extents {
		xl := int64(x.Blocks) * bs
		if n > 0 && off < pos+xl {
			in := off - pos
			k := min(xl-in, n)
			out = append(out, access{off: int64(x.LBA)*bs + in, n: k})
			off += k
			n -= k
		}
		pos += xl
	}
	return out
}

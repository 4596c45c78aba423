package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/volume"
)

// Integration tests against nearstore's real target, through a TCP proxy
// that can cut every connection as a crashing network would.

const testNQN = "nqn.2024-01.io.nearstore:host-test"

// proxy forwards TCP connections to a target and can kill them all.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newProxy(t testing.TB, targetAddr string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: targetAddr, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.killAll()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		to := p.target
		p.mu.Unlock()
		up, err := net.Dial("tcp", to)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.conns[down], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Add(2)
		go pipe(up, down)
		go pipe(down, up)
	}
}

// retarget sends later connections to addr.
func (p *proxy) retarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

func (p *proxy) killAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// startTarget serves a subsystem with two mem namespaces, of 64 and 8 MiB,
// and returns its address.
func startTarget(t testing.TB) (addr string) {
	t.Helper()
	var vs []volume.Volume
	for _, spec := range []string{"mem:64MiB", "mem:8MiB"} {
		v, err := volume.Open(spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		vs = append(vs, v)
	}
	tgt := testtarget.Start(t, testtarget.Config{NQN: testNQN, Name: vs[0].String(), Volume: vs[0], More: vs[1:]})
	t.Cleanup(tgt.Stop)
	return tgt.Addr()
}

func fill(rng *rand.Rand, p []byte) {
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
}

func TestTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"plain", Options{IOQueues: 2}},
		{"digests", Options{IOQueues: 2, HeaderDigest: true, DataDigest: true}},
		{"no-sqflow", Options{IOQueues: 2, DisableSQFlowControl: true, DataDigest: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			addr := startTarget(t)
			c, err := Connect(ctxT(t, 5*time.Second), addr, testNQN, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := c.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
			if id := c.Identify(); id.SubNQN != testNQN || id.CNTLID != c.CNTLID() {
				t.Errorf("identify: %+v", id)
			}
			if c.IOQueues() != 2 {
				t.Errorf("IOQueues = %d", c.IOQueues())
			}
			nss := c.Namespaces()
			if len(nss) != 2 || nss[0].Size() != 64<<20 || nss[1].Size() != 8<<20 || nss[0].NGUID() == ([16]byte{}) || nss[0].UUID() == ([16]byte{}) {
				t.Fatalf("namespaces: %d", len(nss))
			}
			ns := nss[0]
			bs := ns.BlockSize()
			rng := rand.New(rand.NewPCG(3, 4))
			ctx := ctxT(t, 30*time.Second)

			// Byte-granular I/O, small to larger than MDTS (R2T, splits).
			for _, rw := range []struct{ off, n int }{
				{0, bs}, {bs, 4096}, {3, 10}, {bs - 2, 4}, {100, 5000}, {4096, 16 << 10}, {4096, 16<<10 + bs},
				{12345, 3 << 20}, {int(ns.Size()) - 777, 777}, {1 << 20, 1 << 20},
			} {
				p := make([]byte, rw.n)
				fill(rng, p)
				if n, err := ns.WriteAtContext(ctx, p, int64(rw.off)); err != nil || n != rw.n {
					t.Fatalf("WriteAt(%d, %d) = %d, %v", rw.off, rw.n, n, err)
				}
				q := make([]byte, rw.n)
				if n, err := ns.ReadAtContext(ctx, q, int64(rw.off)); err != nil || n != rw.n || !bytes.Equal(p, q) {
					t.Fatalf("ReadAt(%d, %d) = %d, %v, equal %v", rw.off, rw.n, n, err, bytes.Equal(p, q))
				}
			}

			// QD 128 over 2 queues: 4 goroutines with 32 calls in flight
			// each, on disjoint regions, writing then verifying.
			const workers, qd, perWorker, blocks = 4, 32, 512, 8
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					region := uint64(w) * perWorker * blocks
					done := make(chan *Call, qd)
					pattern := func(i int) []byte {
						b := make([]byte, blocks*bs)
						for j := range b {
							b[j] = byte(i*31 + j + w)
						}
						return b
					}
					for phase := range 2 {
						inflight := 0
						reap := func() {
							call := <-done
							inflight--
							if call.Err != nil {
								t.Errorf("phase %d: %v", phase, call.Err)
								return
							}
							if phase == 1 {
								i := int(call.Cmd.SLBA()-region) / blocks
								if !bytes.Equal(call.In, pattern(i)) {
									t.Errorf("lba %d: wrong data", call.Cmd.SLBA())
								}
							}
						}
						for i := range perWorker {
							lba := region + uint64(i*blocks)
							if phase == 0 {
								ns.WriteBlocks(ctx, pattern(i), lba, done)
							} else {
								ns.ReadBlocks(ctx, make([]byte, blocks*bs), lba, done)
							}
							if inflight++; inflight == qd {
								reap()
							}
						}
						for inflight > 0 {
							reap()
						}
					}
				})
			}
			wg.Wait()

			// Flush, Write Zeroes, Deallocate.
			if err := ns.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := ns.WriteZeroes(ctx, 64*int64(bs), 1<<20); err != nil {
				t.Fatal(err)
			}
			q := make([]byte, 1<<20)
			if _, err := ns.ReadAtContext(ctx, q, 64*int64(bs)); err != nil || !bytes.Equal(q, make([]byte, 1<<20)) {
				t.Fatalf("after WriteZeroes: %v", err)
			}
			if err := ns.Deallocate(ctx, 0, 1<<20); err != nil {
				t.Fatal(err)
			}
			if ns.IdentifyData().DLFEAT&7 == 1 {
				if _, err := ns.ReadAtContext(ctx, q, 0); err != nil || !bytes.Equal(q, make([]byte, 1<<20)) {
					t.Fatalf("after Deallocate: %v", err)
				}
			}
			// Out of range reads fail with the controller's status.
			cmd := nvme.Command{Opcode: nvme.IORead}
			cmd.SetLBA(ns.Blocks(), 1)
			if _, err := ns.IO(ctx, &cmd, nil, make([]byte, bs)); !errors.Is(err, &nvme.StatusError{Status: nvme.StatusLBAOutOfRange}) {
				t.Errorf("read past end: %v", err)
			}
			if st := c.Stats(); st.Commands == 0 || st.DroppedDone != 0 || st.ConnLosses != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestTargetDiscover(t *testing.T) {
	checkGoroutines(t)
	addr := startTarget(t)
	es, err := Discover(ctxT(t, 5*time.Second), addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range es {
		found = found || e.SubNQN == testNQN
	}
	if !found {
		t.Errorf("discovery log %+v lacks %s", es, testNQN)
	}
}

// cutReads is a readAcrossCut: want written at off, then read back by
// readers goroutines while every connection is cut, for up to wait for
// the reconnect.
type cutReads struct {
	want    []byte
	off     int64
	readers int
	wait    time.Duration
}

// readAcrossCut writes r.want, keeps r.readers reads of it in flight while
// p cuts every connection of c, waits for c to reconnect, and checks that
// the same handle reads the data on the new association. Every read must
// return the data or ErrConnectionLost; it returns how many did each.
func readAcrossCut(t *testing.T, c *Controller, ns *Namespace, p *proxy, r cutReads) (ok, lost int) {
	t.Helper()
	ctx := ctxT(t, r.wait+time.Minute)
	if _, err := ns.WriteAtContext(ctx, r.want, r.off); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range r.readers {
		wg.Go(func() {
			got := make([]byte, len(r.want))
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := ns.ReadAtContext(ctx, got, r.off)
				mu.Lock()
				switch {
				case err == nil && bytes.Equal(got, r.want):
					ok++
				case errors.Is(err, ErrConnectionLost):
					lost++
				default:
					mu.Unlock()
					t.Errorf("read: %v (or other data)", err)
					return
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	p.killAll()
	waitFor(t, r.wait, "reconnect", func() bool { return c.Stats().Reconnects >= 1 })
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	got := make([]byte, len(r.want))
	if _, err := ns.ReadAtContext(ctx, got, r.off); err != nil || !bytes.Equal(got, r.want) {
		t.Fatalf("after reconnect: %v", err)
	}
	return ok, lost
}

func TestTargetReconnect(t *testing.T) {
	checkGoroutines(t)
	addr := startTarget(t)
	p := newProxy(t, addr)
	c, ns := connectNS(t, ctxT(t, 5*time.Second), p.addr(), 1, Options{IOQueues: 2, ReconnectDelay: 10 * time.Millisecond})
	old := c.CNTLID()
	ok, lost := readAcrossCut(t, c, ns, p, cutReads{want: bytes.Repeat([]byte("nearstore"), 1000), off: 4096, readers: 1, wait: 5 * time.Second})
	if ok == 0 {
		t.Error("no successful reads")
	}
	t.Logf("reads: %d ok, %d lost; cntlid %d -> %d", ok, lost, old, c.CNTLID())
	if c.IOQueues() != 2 {
		t.Errorf("IOQueues after reconnect = %d", c.IOQueues())
	}
}

// TestReconnectToAnotherVolume: when a reconnect lands on a target that
// serves another volume under the same NQN and NSID (another target now
// at the address, or a RAM volume served again empty), the old handle
// refuses every command with ErrNamespaceChanged, and none of them
// reaches the new volume; Controller.Namespace gives a working handle to
// the new one. A reconnect to the same volume keeps the handle working
// (TestTargetReconnect).
func TestReconnectToAnotherVolume(t *testing.T) {
	checkGoroutines(t)
	addrA := startTarget(t)
	addrB := startTarget(t) // same specs and NQN, other volumes
	p := newProxy(t, addrA)
	c, old := connectNS(t, ctxT(t, 5*time.Second), p.addr(), 1, Options{IOQueues: 2, ReconnectDelay: 10 * time.Millisecond})
	ctx := ctxT(t, 20*time.Second)
	data := bytes.Repeat([]byte("volume A"), 512)
	if _, err := old.WriteAtContext(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	p.retarget(addrB)
	p.killAll()
	waitFor(t, 5*time.Second, "reconnect", func() bool { return c.Stats().Reconnects >= 1 })

	buf := make([]byte, len(data))
	if _, err := old.WriteAtContext(ctx, data, 8192); !errors.Is(err, ErrNamespaceChanged) {
		t.Errorf("write through the old handle: %v, want ErrNamespaceChanged", err)
	}
	if _, err := old.ReadAtContext(ctx, buf, 0); !errors.Is(err, ErrNamespaceChanged) {
		t.Errorf("read through the old handle: %v, want ErrNamespaceChanged", err)
	}
	b := old.NewBatch()
	call := b.WriteBlocks(data[:4096], 0, nil)
	b.Submit(ctx)
	if <-call.Done; !errors.Is(call.Err, ErrNamespaceChanged) {
		t.Errorf("batched write through the old handle: %v, want ErrNamespaceChanged", call.Err)
	}

	// The new namespace has none of those writes, and works.
	ns, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	if ns == old {
		t.Fatal("Controller.Namespace returned the old handle")
	}
	got := make([]byte, 3*len(data))
	if _, err := ns.ReadAtContext(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, len(got))) {
		t.Error("the other volume holds bytes written through the old handle")
	}
	if _, err := ns.WriteAtContext(ctx, data, 0); err != nil {
		t.Fatalf("write through the new handle: %v", err)
	}
	if _, err := ns.ReadAtContext(ctx, buf, 0); err != nil || !bytes.Equal(buf, data) {
		t.Fatalf("read through the new handle: %v", err)
	}
}

// TestControllerLossTimeout: a controller that cannot reconnect within
// Options.ControllerLossTimeout gives up: a submission waiting for the
// connection fails with ErrConnectionLost long before MaxReconnectWait,
// later ones fail at once, and Close returns.
func TestControllerLossTimeout(t *testing.T) {
	checkGoroutines(t)
	addr := startTarget(t)
	p := newProxy(t, addr)
	c, ns := connectNS(t, ctxT(t, 5*time.Second), p.addr(), 1, Options{
		ReconnectDelay: 10 * time.Millisecond, MaxReconnectWait: time.Hour, ControllerLossTimeout: 300 * time.Millisecond,
	})
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead.Close() // nothing listens there now: every reconnect fails
	p.retarget(dead.Addr().String())
	p.killAll()
	waitFor(t, 5*time.Second, "the connection loss", func() bool { return c.Stats().ConnLosses >= 1 })
	// The test's own deadline is far later: failing by it would mean the
	// controller never gave up.
	ctx := ctxT(t, 60*time.Second)
	buf := make([]byte, 4096)
	for i, what := range []string{"waiting", "later"} {
		_, err := ns.ReadAtContext(ctx, buf, 0)
		if !errors.Is(err, ErrConnectionLost) || !strings.Contains(err.Error(), "gave up reconnecting") {
			t.Fatalf("%s read (%d): %v, want ErrConnectionLost after giving up", what, i, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func BenchmarkReadQD32(b *testing.B) {
	for _, size := range []int{4096, 128 << 10} {
		b.Run(byteSize(size), func(b *testing.B) {
			addr := startTarget(b)
			c, err := Connect(context.Background(), addr, testNQN, Options{IOQueues: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ns := c.Namespaces()[0]
			const qd = 32
			blocks := uint64(ns.Size()) / uint64(size)
			done := make(chan *Call, qd)
			bufs := make([][]byte, qd)
			for i := range bufs {
				bufs[i] = make([]byte, size)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			ctx := context.Background()
			inflight, next := 0, 0
			free := make([][]byte, 0, qd)
			free = append(free, bufs...)
			for i := 0; i < b.N; i++ {
				if len(free) == 0 {
					call := <-done
					if call.Err != nil {
						b.Fatal(call.Err)
					}
					free = append(free, call.In)
					inflight--
				}
				buf := free[len(free)-1]
				free = free[:len(free)-1]
				lba := uint64(next%int(blocks)) * uint64(size/ns.BlockSize())
				next++
				ns.ReadBlocks(ctx, buf, lba, done)
				inflight++
			}
			for ; inflight > 0; inflight-- {
				if call := <-done; call.Err != nil {
					b.Fatal(call.Err)
				}
			}
		})
	}
}

func byteSize(n int) string { return fmt.Sprintf("%dKiB", n>>10) }

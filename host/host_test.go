package host

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
)

// checkGoroutines fails t if goroutines started after it was called are
// still running at the end of the test (after t's cleanups).
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Errorf("goroutine leak: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connectNS connects to testNQN at addr with opts, for the rest of the
// test, and returns namespace nsid beside the controller.
func connectNS(t *testing.T, ctx context.Context, addr string, nsid uint32, opts Options) (*Controller, *Namespace) {
	t.Helper()
	c, err := Connect(ctx, addr, testNQN, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ns, err := c.Namespace(nsid)
	if err != nil {
		t.Fatal(err)
	}
	return c, ns
}

func connectFake(t *testing.T, ft *fakeTarget, opts Options) *Controller {
	t.Helper()
	c, err := Connect(ctxT(t, 5*time.Second), ft.addr(), "nqn.fake", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConnectIdentify(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	c := connectFake(t, ft, Options{IOQueues: 3, QueueDepth: 16})
	id := c.Identify()
	if id.Model != "fake" || id.MDTS != 3 {
		t.Errorf("identify = %+v", id)
	}
	if got := c.IOQueues(); got != 3 {
		t.Errorf("IOQueues = %d", got)
	}
	if got := c.MaxTransfer(); got != 8*4096 {
		t.Errorf("MaxTransfer = %d", got)
	}
	nss := c.Namespaces()
	if len(nss) != 1 {
		t.Fatalf("namespaces = %d", len(nss))
	}
	ns := nss[0]
	if ns.ID() != 1 || ns.BlockSize() != 512 || ns.Size() != 512*8192 || ns.NGUID() != fakeNGUID || ns.UUID() != fakeUUID {
		t.Errorf("namespace: id %d bs %d size %d nguid %x uuid %x", ns.ID(), ns.BlockSize(), ns.Size(), ns.NGUID(), ns.UUID())
	}
	if _, err := c.Namespace(2); err == nil {
		t.Error("Namespace(2) succeeded")
	}
	if dw0, err := c.GetFeature(ctxT(t, time.Second), nvme.FeatArbitration, 0); err != nil || dw0 != 0x1234 {
		t.Errorf("GetFeature = %#x, %v", dw0, err)
	}
	_, err := c.Admin(ctxT(t, time.Second), &nvme.Command{Opcode: 0xC1}, nil, nil)
	var se *nvme.StatusError
	if !errors.As(err, &se) || se.Status.Code() != nvme.StatusInvalidOpcode || !errors.Is(err, &nvme.StatusError{Status: nvme.StatusInvalidOpcode}) {
		t.Errorf("vendor admin error = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c.Admin(context.Background(), &nvme.Command{Opcode: nvme.AdminKeepAlive}, nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Admin after Close = %v", err)
	}
	if _, err := ns.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadAt after Close = %v", err)
	}
}

func TestReadWriteAt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		success bool
		cpda    uint8
	}{
		{name: "plain", opts: Options{IOQueues: 2}},
		{name: "digests", opts: Options{IOQueues: 2, HeaderDigest: true, DataDigest: true}},
		{name: "header-digest-cpda", opts: Options{HeaderDigest: true}, cpda: 7},
		{name: "c2h-success", opts: Options{DataDigest: true}, success: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			ft := newFakeTarget(t)
			ft.c2hSuccess = tc.success
			ft.icresp = func(req tcp.ICReq) tcp.ICResp {
				return tcp.ICResp{Digest: req.Digest, CPDA: tc.cpda, MaxH2CData: 8192}
			}
			c := connectFake(t, ft, tc.opts)
			ns := c.Namespaces()[0]
			rng := rand.New(rand.NewPCG(1, 2))
			for _, rw := range []struct{ off, n int }{
				{0, 512}, {512, 4096}, {3, 10}, {510, 4}, {100, 1000}, {1000, 70000}, {4096, 200000},
				{ft.bs*ft.blocks - 700, 700}, {77, 512}, {0, 8 * 4096},
			} {
				p := make([]byte, rw.n)
				for i := range p {
					p[i] = byte(rng.Uint32())
				}
				n, err := ns.WriteAtContext(ctxT(t, 5*time.Second), p, int64(rw.off))
				if err != nil || n != rw.n {
					t.Fatalf("WriteAt(%d, %d) = %d, %v", rw.off, rw.n, n, err)
				}
				if got := ft.snapshot(rw.off, rw.n); !bytes.Equal(got, p) {
					t.Fatalf("WriteAt(%d, %d): target holds different data", rw.off, rw.n)
				}
				q := make([]byte, rw.n)
				n, err = ns.ReadAtContext(ctxT(t, 5*time.Second), q, int64(rw.off))
				if err != nil || n != rw.n || !bytes.Equal(p, q) {
					t.Fatalf("ReadAt(%d, %d) = %d, %v, equal %v", rw.off, rw.n, n, err, bytes.Equal(p, q))
				}
			}
			// Reading across the end returns io.EOF and what there is.
			q := make([]byte, 1024)
			n, err := ns.ReadAt(q, ns.Size()-100)
			if n != 100 || err == nil || err.Error() != "EOF" {
				t.Errorf("ReadAt across end = %d, %v", n, err)
			}
			if _, err := ns.WriteAt(q, ns.Size()-100); err == nil {
				t.Error("WriteAt across end succeeded")
			}
			st := c.Stats()
			if st.BytesWritten == 0 || st.BytesRead == 0 || st.Errors != 0 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

func TestAsyncManyInFlight(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	c := connectFake(t, ft, Options{IOQueues: 2, QueueDepth: 128})
	ns := c.Namespaces()[0]
	const workers, perWorker, blocks = 4, 200, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			ctx := ctxT(t, 20*time.Second)
			done := make(chan *Call, 64)
			inflight := 0
			region := uint64(w * 2048) // disjoint per worker
			want := map[*Call][]byte{}
			check := func(call *Call) {
				inflight--
				if call.Err != nil {
					t.Errorf("call: %v", call.Err)
					return
				}
				if exp, ok := want[call]; ok && !bytes.Equal(exp, call.In) {
					t.Errorf("read lba %d: wrong data", call.Cmd.SLBA())
				}
				delete(want, call)
			}
			for i := range perWorker {
				lba := region + uint64(i%200)*blocks
				buf := make([]byte, blocks*512)
				if i%2 == 0 {
					for j := range buf {
						buf[j] = byte(i + j + w)
					}
					ns.WriteBlocks(ctx, buf, lba, done)
				} else {
					want[ns.ReadBlocks(ctx, buf, lba, done)] = ft.snapshot(int(lba)*512, len(buf))
				}
				inflight++
				for inflight >= 32 {
					check(<-done)
				}
			}
			for inflight > 0 {
				check(<-done)
			}
		})
	}
	wg.Wait()
	if st := c.Stats(); st.Commands < workers*perWorker || st.DroppedDone != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestFlushZeroesDeallocate(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	c := connectFake(t, ft, Options{})
	ns := c.Namespaces()[0]
	ctx := ctxT(t, 5*time.Second)
	if err := ns.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ns.WriteZeroes(ctx, 1024, 4096); err != nil {
		t.Fatal(err)
	}
	if got := ft.snapshot(1024, 4096); !bytes.Equal(got, make([]byte, 4096)) {
		t.Error("WriteZeroes left data")
	}
	if ft.snapshot(1020, 4)[0] == 0 && ft.snapshot(1020, 4)[3] == 0 {
		t.Error("WriteZeroes zeroed too much")
	}
	if err := ns.Deallocate(ctx, 8192, 512*100); err != nil {
		t.Fatal(err)
	}
	if got := ft.snapshot(8192, 512*100); !bytes.Equal(got, make([]byte, 512*100)) {
		t.Error("Deallocate left data")
	}
	for _, bad := range [][2]int64{{1, 512}, {0, 0}, {0, 100}, {ns.Size(), 512}, {-512, 512}} {
		if err := ns.WriteZeroes(ctx, bad[0], bad[1]); err == nil {
			t.Errorf("WriteZeroes(%d, %d) succeeded", bad[0], bad[1])
		}
		if err := ns.Deallocate(ctx, bad[0], bad[1]); err == nil {
			t.Errorf("Deallocate(%d, %d) succeeded", bad[0], bad[1])
		}
	}
}

func TestBadICResp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		icresp func(req tcp.ICReq) tcp.ICResp
		want   string
	}{
		{"pfv", Options{}, func(tcp.ICReq) tcp.ICResp { return tcp.ICResp{PFV: 1, MaxH2CData: 8192} }, "PFV"},
		{"digest-not-requested", Options{}, func(tcp.ICReq) tcp.ICResp {
			return tcp.ICResp{Digest: tcp.DigestHeader, MaxH2CData: 8192}
		}, "digests"},
		{"data-digest-not-requested", Options{HeaderDigest: true}, func(tcp.ICReq) tcp.ICResp {
			return tcp.ICResp{Digest: tcp.DigestData | tcp.DigestHeader, MaxH2CData: 8192}
		}, "digests"},
		{"tiny-maxh2cdata", Options{}, func(tcp.ICReq) tcp.ICResp { return tcp.ICResp{MaxH2CData: 1024} }, "MAXH2CDATA"},
		{"unaligned-maxh2cdata", Options{}, func(tcp.ICReq) tcp.ICResp { return tcp.ICResp{MaxH2CData: 8191} }, "MAXH2CDATA"},
		{"cpda", Options{}, func(tcp.ICReq) tcp.ICResp { return tcp.ICResp{CPDA: 32, MaxH2CData: 8192} }, "CPDA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			ft := newFakeTarget(t)
			ft.icresp = tc.icresp
			_, err := Connect(ctxT(t, 5*time.Second), ft.addr(), "nqn.fake", tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Connect = %v, want error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestDigestsRefusedStillWork(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	ft.icresp = func(tcp.ICReq) tcp.ICResp { return tcp.ICResp{MaxH2CData: 8192} }
	c := connectFake(t, ft, Options{HeaderDigest: true, DataDigest: true})
	ns := c.Namespaces()[0]
	if _, err := ns.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
}

// misbehave makes the fake answer the next I/O read with bad PDUs produced
// by f, once.
func misbehave(ft *fakeTarget, opc uint8, f func(fc *fakeConn, cmd *nvme.Command)) {
	var once sync.Once
	ft.setHook(func(fc *fakeConn, cmd *nvme.Command, data []byte) bool {
		if fc.qid == 0 || cmd.Opcode != opc {
			return false
		}
		handled := false
		once.Do(func() { f(fc, cmd); handled = true })
		return handled
	})
}

func TestProtocolViolations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opc     uint8
		f       func(fc *fakeConn, cmd *nvme.Command)
		termReq bool // the host must send an H2CTermReq
		fes     uint16
	}{
		{"r2t-out-of-range", nvme.IOWrite, func(fc *fakeConn, cmd *nvme.Command) {
			fc.write(func(f *tcp.Framer) error {
				return f.WriteR2T(tcp.DataHeader{CCCID: cmd.CID, Offset: cmd.DPTR.Length - 512, Length: 1024})
			})
		}, true, tcp.FESDataOutOfRange},
		{"r2t-zero-length", nvme.IOWrite, func(fc *fakeConn, cmd *nvme.Command) {
			fc.write(func(f *tcp.Framer) error { return f.WriteR2T(tcp.DataHeader{CCCID: cmd.CID, Offset: 0, Length: 0}) })
		}, true, tcp.FESDataOutOfRange},
		{"r2t-unknown-cid", nvme.IOWrite, func(fc *fakeConn, cmd *nvme.Command) {
			fc.write(func(f *tcp.Framer) error { return f.WriteR2T(tcp.DataHeader{CCCID: cmd.CID + 1, Length: 512}) })
		}, true, tcp.FESInvalidHeaderField},
		{"r2t-for-read", nvme.IORead, func(fc *fakeConn, cmd *nvme.Command) {
			fc.write(func(f *tcp.Framer) error { return f.WriteR2T(tcp.DataHeader{CCCID: cmd.CID, Length: 512}) })
		}, true, tcp.FESInvalidHeaderField},
		{"c2h-unknown-cid", nvme.IORead, func(fc *fakeConn, cmd *nvme.Command) {
			fc.write(func(f *tcp.Framer) error {
				return f.WriteC2HData(tcp.DataHeader{CCCID: cmd.CID + 7}, true, false, make([]byte, 512))
			})
		}, true, tcp.FESInvalidHeaderField},
		{"c2h-out-of-range", nvme.IORead, func(fc *fakeConn, cmd *nvme.Command) {
			fc.write(func(f *tcp.Framer) error {
				return f.WriteC2HData(tcp.DataHeader{CCCID: cmd.CID, Offset: cmd.DPTR.Length}, true, false, make([]byte, 512))
			})
		}, true, tcp.FESDataOutOfRange},
		{"completion-unknown-cid", nvme.IORead, func(fc *fakeConn, cmd *nvme.Command) {
			fc.respond(cmd.CID+9, nvme.StatusSuccess, 0)
		}, true, tcp.FESInvalidHeaderField},
		{"c2h-termreq", nvme.IORead, func(fc *fakeConn, cmd *nvme.Command) {
			fc.write(func(f *tcp.Framer) error {
				return f.WriteTermReq(tcp.TermReq{FES: tcp.FESInvalidHeaderField, FEI: 3}, make([]byte, 72))
			})
			fc.conn.Close()
		}, false, 0},
		{"dropped-mid-read", nvme.IORead, func(fc *fakeConn, cmd *nvme.Command) {
			fc.write(func(f *tcp.Framer) error {
				return f.WriteC2HData(tcp.DataHeader{CCCID: cmd.CID}, false, false, make([]byte, 512))
			})
			fc.conn.Close()
		}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			ft := newFakeTarget(t)
			c := connectFake(t, ft, Options{ReconnectDelay: 10 * time.Millisecond})
			ns := c.Namespaces()[0]
			misbehave(ft, tc.opc, tc.f)
			buf := make([]byte, 64*512) // big enough to need R2Ts for writes
			ctx := ctxT(t, 5*time.Second)
			var err error
			if tc.opc == nvme.IOWrite {
				_, err = ns.WriteAtContext(ctx, buf, 0)
			} else {
				_, err = ns.ReadAtContext(ctx, buf, 0)
			}
			if !errors.Is(err, ErrConnectionLost) {
				t.Fatalf("err = %v, want ErrConnectionLost", err)
			}
			if tc.termReq {
				select {
				case tr := <-ft.termReqs:
					if tr.FES != tc.fes {
						t.Errorf("H2CTermReq FES %d, want %d", tr.FES, tc.fes)
					}
				case <-time.After(2 * time.Second):
					t.Fatal("no H2CTermReq")
				}
			}
			// The controller reconnects and the same handle works again.
			ft.setHook(nil)
			if _, err := ns.ReadAtContext(ctx, buf, 0); err != nil {
				t.Fatalf("after reconnect: %v", err)
			}
			if st := c.Stats(); st.Reconnects != 1 || st.ConnLosses != 1 {
				t.Errorf("stats = %+v", st)
			}
			if ft.connects.Load() != 2 {
				t.Errorf("admin connects = %d, want 2", ft.connects.Load())
			}
		})
	}
}

func TestC2HDataDigestError(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	c := connectFake(t, ft, Options{DataDigest: true})
	ns := c.Namespaces()[0]
	// Send a C2HData with a wrong data digest by writing the PDU by hand.
	misbehave(ft, nvme.IORead, func(fc *fakeConn, cmd *nvme.Command) {
		n := int(cmd.DPTR.Length)
		pdu := make([]byte, 24+n+4)
		pdu[0], pdu[1], pdu[2], pdu[3] = tcp.TypeC2HData, tcp.FlagDDGST|tcp.FlagLastPDU, 24, 24
		le := func(b []byte, v uint32) { b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }
		le(pdu[4:], uint32(len(pdu)))
		pdu[8], pdu[9] = byte(cmd.CID), byte(cmd.CID>>8)
		le(pdu[16:], uint32(n))
		le(pdu[24+n:], 0xdeadbeef)
		fc.wmu.Lock()
		fc.conn.Write(pdu)
		fc.wmu.Unlock()
		fc.respond(cmd.CID, nvme.StatusSuccess, 0)
	})
	_, err := ns.ReadAt(make([]byte, 512), 0)
	if !errors.Is(err, &nvme.StatusError{Status: nvme.StatusTransientTransport}) {
		t.Fatalf("err = %v, want transient transport error", err)
	}
	// Not fatal: the connection carries on.
	if _, err := ns.ReadAt(make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	if c.Stats().ConnLosses != 0 {
		t.Error("digest error dropped the connection")
	}
}

func TestContextCancel(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	c := connectFake(t, ft, Options{QueueDepth: 1})
	ns := c.Namespaces()[0]
	// Hold reads: the fake answers them only when released.
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	var held sync.WaitGroup
	ft.setHook(func(fc *fakeConn, cmd *nvme.Command, data []byte) bool {
		if fc.qid == 0 || cmd.Opcode != nvme.IORead {
			return false
		}
		cmd2 := *cmd
		held.Go(func() {
			<-release
			fc.ft.setHook(nil)
			fc.sendData(cmd2.CID, make([]byte, cmd2.DPTR.Length))
		})
		arrived <- struct{}{}
		return true
	})
	buf := make([]byte, 512)
	ctx1, cancel1 := context.WithCancel(context.Background())
	first := ns.ReadBlocks(ctx1, buf, 0, nil)
	<-arrived
	// The queue (depth 1) is full: a second submission waits, and its
	// context ends the wait.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	second := ns.ReadBlocks(ctx2, make([]byte, 512), 0, nil)
	<-second.Done
	if !errors.Is(second.Err, context.DeadlineExceeded) {
		t.Errorf("waiting submission: %v", second.Err)
	}
	// Cancelling the in-flight one completes it at once...
	cancel1()
	select {
	case <-first.Done:
	case <-time.After(time.Second):
		t.Fatal("cancelled call not delivered")
	}
	if !errors.Is(first.Err, context.Canceled) {
		t.Errorf("in-flight cancel: %v", first.Err)
	}
	// ...but the slot stays taken until the controller answers.
	ctx3, cancel3 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel3()
	if _, err := ns.ReadAtContext(ctx3, buf, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slot freed early: %v", err)
	}
	for i := range buf {
		buf[i] = 0x55
	}
	close(release)
	held.Wait()
	if _, err := ns.ReadAtContext(ctxT(t, 2*time.Second), make([]byte, 512), 0); err != nil {
		t.Fatalf("after release: %v", err)
	}
	// The late data must not have landed in the abandoned buffer.
	for _, b := range buf {
		if b != 0x55 {
			t.Fatal("abandoned call's buffer was written")
		}
	}
	if st := c.Stats(); st.Abandoned != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestKeepAliveFailureReconnects(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	c := connectFake(t, ft, Options{KeepAlive: 200 * time.Millisecond, ReconnectDelay: 10 * time.Millisecond})
	var dropped sync.Once
	ft.setHook(func(fc *fakeConn, cmd *nvme.Command, data []byte) bool {
		if fc.qid == 0 && cmd.Opcode == nvme.AdminKeepAlive {
			swallowed := false
			dropped.Do(func() { swallowed = true })
			return swallowed // never answered: keep-alive times out
		}
		return false
	})
	waitFor(t, 5*time.Second, "reconnect after keep-alive failure", func() bool { return c.Stats().Reconnects == 1 })
	if _, err := c.Namespaces()[0].ReadAt(make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
}

// refuseConnects makes ft answer every Connect with Controller Busy until
// the returned accept is called.
func refuseConnects(ft *fakeTarget) (accept func()) {
	var refusing atomic.Bool
	refusing.Store(true)
	ft.setHook(func(fc *fakeConn, cmd *nvme.Command, data []byte) bool {
		if refusing.Load() && cmd.Opcode == nvme.AdminFabrics && cmd.FabricsType() == nvme.FabricsConnect {
			fc.respond(cmd.CID, nvme.StatusConnectControllerBusy, 0)
			return true
		}
		return false
	})
	return func() { refusing.Store(false) }
}

func TestReconnectWaitAndGiveUp(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	c := connectFake(t, ft, Options{ReconnectDelay: 10 * time.Millisecond, MaxReconnectWait: 300 * time.Millisecond})
	ns := c.Namespaces()[0]
	// Refuse connects for a while: submissions wait, then proceed.
	accept := refuseConnects(ft)
	ft.killAll()
	waitFor(t, 2*time.Second, "connection loss", func() bool { return c.Stats().ConnLosses == 1 })
	start := time.Now()
	_, err := ns.ReadAt(make([]byte, 512), 0)
	if !errors.Is(err, ErrConnectionLost) || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("read while target refuses: %v after %v", err, time.Since(start))
	}
	time.AfterFunc(100*time.Millisecond, accept)
	// Each attempt waits at most MaxReconnectWait; the backoff may be
	// longer than that by now, so retry.
	waitFor(t, 10*time.Second, "read after target recovers", func() bool {
		_, err := ns.ReadAt(make([]byte, 512), 0)
		return err == nil
	})
}

// TestMaxTransferWhileReconnecting checks that a request split while the
// controller is away is split to the last association's MDTS, not to a
// default larger than what the controller accepts when it is back.
func TestMaxTransferWhileReconnecting(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	c := connectFake(t, ft, Options{ReconnectDelay: 10 * time.Millisecond, MaxReconnectWait: 100 * time.Millisecond})
	accept := refuseConnects(ft)
	ft.killAll()
	waitFor(t, 2*time.Second, "connection loss", func() bool { return c.Stats().ConnLosses == 1 })
	if got := c.MaxTransfer(); got != 8*4096 {
		t.Errorf("MaxTransfer while reconnecting = %d, want the last association's %d", got, 8*4096)
	}
	accept()
	ns := c.Namespaces()[0]
	waitFor(t, 10*time.Second, "write after target recovers", func() bool {
		_, err := ns.WriteAt(make([]byte, 3*8*4096), 0)
		return err == nil
	})
}

func TestCloseWhileReconnecting(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	c := connectFake(t, ft, Options{ReconnectDelay: 10 * time.Millisecond})
	ft.ln.Close() // no reconnect can succeed
	ft.killAll()
	waitFor(t, 2*time.Second, "connection loss", func() bool { return c.Stats().ConnLosses == 1 })
	errc := make(chan error, 1)
	go func() {
		_, err := c.Namespaces()[0].ReadAt(make([]byte, 512), 0)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("waiting read: %v", err)
	}
}

func TestDiscover(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	es, err := Discover(ctxT(t, 5*time.Second), ft.addr(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].SubNQN != "nqn.fake" || es[0].TrSvcID != "4420" || es[1].SubType != nvme.SubTypeCurrentDisc {
		t.Errorf("entries = %+v", es)
	}
}

func TestConnectErrors(t *testing.T) {
	checkGoroutines(t)
	ft := newFakeTarget(t)
	ft.setHook(func(fc *fakeConn, cmd *nvme.Command, data []byte) bool {
		if cmd.Opcode == nvme.AdminFabrics && cmd.FabricsType() == nvme.FabricsConnect {
			fc.respond(cmd.CID, nvme.StatusConnectInvalidHost|nvme.DNR, 0)
			return true
		}
		return false
	})
	_, err := Connect(ctxT(t, 5*time.Second), ft.addr(), "nqn.fake", Options{})
	if !errors.Is(err, &nvme.StatusError{Status: nvme.StatusConnectInvalidHost}) {
		t.Errorf("Connect = %v", err)
	}
	// A controller that never answers Connect: bounded by DialTimeout.
	ft.setHook(func(fc *fakeConn, cmd *nvme.Command, data []byte) bool { return true })
	start := time.Now()
	_, err = Connect(context.Background(), ft.addr(), "nqn.fake", Options{DialTimeout: 200 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("Connect to a mute controller = %v after %v", err, time.Since(start))
	}
	// Nothing listening.
	ft.close()
	if _, err := Connect(ctxT(t, 5*time.Second), ft.addr(), "nqn.fake", Options{}); err == nil {
		t.Error("Connect to closed port succeeded")
	}
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		off, n    int64
		maxBlocks int
		want      int // segments
	}{
		{0, 512, 8, 1}, {0, 4096, 8, 1}, {0, 4097, 8, 2}, {1, 10, 8, 1}, {511, 2, 8, 2},
		{100, 8192, 8, 4}, {512, 512 * 17, 8, 3},
	} {
		p := make([]byte, tc.n)
		segs := plan(p, tc.off, 512, tc.maxBlocks)
		if len(segs) != tc.want {
			t.Errorf("plan(%d, %d) = %d segments, want %d: %+v", tc.off, tc.n, len(segs), tc.want, segs)
		}
		covered := 0
		for _, s := range segs {
			if s.pOff != covered {
				t.Errorf("plan(%d, %d): gap at %d", tc.off, tc.n, covered)
			}
			covered += s.n
			if len(s.buf)%512 != 0 || len(s.buf) > tc.maxBlocks*512 {
				t.Errorf("plan(%d, %d): segment of %d bytes", tc.off, tc.n, len(s.buf))
			}
		}
		if covered != int(tc.n) {
			t.Errorf("plan(%d, %d) covers %d", tc.off, tc.n, covered)
		}
	}
}

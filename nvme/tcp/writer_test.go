package tcp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/nvme"
)

// countingWriter counts the writes that reach the connection.
type countingWriter struct {
	bytes.Buffer
	writes int
	fail   error
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.fail != nil {
		return 0, w.fail
	}
	w.writes++
	return w.Buffer.Write(p)
}

func TestWriterDeferFlush(t *testing.T) {
	conn := &countingWriter{}
	w := NewWriter(NewFramer(conn, RoleController, 64<<10))
	resp := func(cid uint16) func(*Framer) error {
		return func(f *Framer) error { return f.WriteCapsuleResp(&nvme.Completion{CID: cid}) }
	}
	for cid := range uint16(8) {
		if err := w.Defer(resp(cid)); err != nil {
			t.Fatal(err)
		}
	}
	if conn.writes != 0 || conn.Len() != 0 {
		t.Fatalf("Defer wrote %d times (%d bytes) before Flush", conn.writes, conn.Len())
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if conn.writes != 1 {
		t.Fatalf("8 deferred PDUs took %d writes, want 1", conn.writes)
	}
	// Nothing buffered: Flush writes nothing.
	if err := w.Flush(); err != nil || conn.writes != 1 {
		t.Fatalf("empty Flush: err %v, writes %d", err, conn.writes)
	}
	// Do sends what Defer left, in order, in the same write.
	if err := w.Defer(resp(8)); err != nil {
		t.Fatal(err)
	}
	if err := w.Do(resp(9)); err != nil {
		t.Fatal(err)
	}
	if conn.writes != 2 {
		t.Fatalf("Defer+Do took %d writes in all, want 2", conn.writes)
	}
	r := NewFramer(&conn.Buffer, RoleHost, 64<<10)
	for want := range uint16(10) {
		h, err := r.ReadHeader()
		if err != nil {
			t.Fatalf("PDU %d: %v", want, err)
		}
		if c := h.Completion(); c.CID != want {
			t.Fatalf("PDU %d has CID %d", want, h.Completion().CID)
		}
	}
}

func TestWriterStickyError(t *testing.T) {
	boom := errors.New("connection reset")
	conn := &countingWriter{fail: boom}
	w := NewWriter(NewFramer(conn, RoleController, 64<<10))
	nop := func(f *Framer) error { return f.WriteCapsuleResp(&nvme.Completion{}) }
	if err := w.Do(nop); !errors.Is(err, boom) {
		t.Fatalf("Do: %v, want %v", err, boom)
	}
	conn.fail = nil
	for name, call := range map[string]func() error{
		"Do":    func() error { return w.Do(nop) },
		"Defer": func() error { return w.Defer(nop) },
		"Flush": w.Flush,
	} {
		if err := call(); !errors.Is(err, boom) {
			t.Errorf("%s after a failed write: %v, want %v", name, err, boom)
		}
	}
}

// combiningPair is a Writer on a real loopback connection, framing as a
// controller, and a host framer reading the other end.
func combiningPair(t *testing.T, digests bool) (*Writer, net.Conn, *Framer, net.Conn) {
	t.Helper()
	c, s := tcpPair(t)
	_ = s.SetReadDeadline(time.Now().Add(time.Minute)) // a stranded PDU fails the test
	f := NewFramer(Duplex{R: c, W: NewRawWriter(c)}, RoleController, 64<<10)
	r := NewFramer(s, RoleHost, 64<<10)
	f.HeaderDigest, f.DataDigest = digests, digests
	r.HeaderDigest, r.DataDigest = digests, digests
	r.MaxData = 16 << 20
	return NewWriter(f), c, r, s
}

// pattern fills b with bytes that name the PDU (sender, sequence) they
// belong to, so a PDU carrying another's data, or a buffer reused before it
// was written, shows.
func pattern(b []byte, sender, seq int) {
	for i := range b {
		b[i] = byte(sender*31 + seq*7 + i)
	}
}

// sizes are the data lengths the combining tests send, around spliceMin
// and the socket buffers.
var sizes = []int{0, 1, 512, spliceMin - 1, spliceMin, 4096, 70 << 10, 300 << 10}

// sendPDU frames one C2HData (or, without data, a response) from sender
// with sequence seq, its data in buf.
func sendPDU(f *Framer, sender, seq int, buf []byte) error {
	if len(buf) == 0 {
		return f.WriteCapsuleResp(&nvme.Completion{CID: uint16(sender), DW0: uint32(seq)})
	}
	return f.WriteC2HData(DataHeader{CCCID: uint16(sender), Offset: uint32(seq)}, true, false, buf)
}

// readPDU reads one PDU sendPDU framed and says whose and which it is.
func readPDU(r *Framer) (sender, seq int, data []byte, err error) {
	h, err := r.ReadHeader()
	if err != nil {
		return 0, 0, nil, err
	}
	if h.Type == TypeCapsuleResp {
		c := h.Completion()
		return int(c.CID), int(c.DW0), nil, nil
	}
	dh := h.Data()
	data = make([]byte, h.DataLen)
	return int(dh.CCCID), int(dh.Offset), data, r.ReadData(data)
}

// TestWriterCombining: many goroutines send PDUs of every size on one
// Writer, each reusing (overwriting) its buffer as soon as Do returns, while
// the peer reads slowly enough that writes fill the socket and complete in
// parts. The peer must read every PDU exactly once, each sender's in the
// order it sent them, each with its own data, with senders lingering
// (SetLinger) or not.
func TestWriterCombining(t *testing.T) {
	for _, tc := range []struct{ digests, linger bool }{{false, false}, {true, false}, {false, true}} {
		t.Run(fmt.Sprintf("digests=%v,linger=%v", tc.digests, tc.linger), func(t *testing.T) {
			w, _, r, _ := combiningPair(t, tc.digests)
			if tc.linger {
				w.SetLinger(func() bool { return true })
			}
			const senders, each = 8, 60
			read := make(chan error, 1)
			go func() {
				next := make([]int, senders)
				for n := 0; n < senders*each; n++ {
					if n%50 == 0 {
						time.Sleep(2 * time.Millisecond) // let the socket fill
					}
					sender, seq, data, err := readPDU(r)
					if err != nil {
						read <- fmt.Errorf("PDU %d: %w", n, err)
						return
					}
					if sender >= senders || seq != next[sender] {
						read <- fmt.Errorf("PDU %d is sender %d's #%d, want #%d", n, sender, seq, next[min(sender, senders-1)])
						return
					}
					next[sender]++
					want := make([]byte, sizes[seq%len(sizes)])
					pattern(want, sender, seq)
					if !bytes.Equal(data, want) {
						read <- fmt.Errorf("sender %d's #%d carries other data", sender, seq)
						return
					}
				}
				read <- nil
			}()
			var wg sync.WaitGroup
			errs := make(chan error, senders)
			for s := range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, sizes[len(sizes)-1])
					for seq := range each {
						b := buf[:sizes[seq%len(sizes)]]
						pattern(b, s, seq)
						err := w.Do(func(f *Framer) error { return sendPDU(f, s, seq, b) })
						clear(buf) // the PDU is the writer's now, not this buffer
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			select {
			case err := <-read:
				if err != nil {
					t.Fatal(err) // closing the connection ends the senders
				}
			case <-time.After(time.Minute):
				t.Fatal("the peer is still waiting for PDUs")
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.busy || !w.f.ob.empty() || w.taken != w.written {
				t.Fatalf("writer left busy %v, empty %v, %d batches taken, %d written", w.busy, w.f.ob.empty(), w.taken, w.written)
			}
			t.Logf("%d PDUs in %d batches", senders*each, w.written)
		})
	}
}

// blockSender has a goroutine send a PDU larger than the socket buffers
// while the peer does not read, and returns once that goroutine is the
// Writer's sender, stuck in its write; its Do's result comes on the channel.
func blockSender(t *testing.T, w *Writer) (big []byte, done chan error) {
	t.Helper()
	big = make([]byte, 8<<20) // more than loopback's socket buffers
	pattern(big, 9, 0)
	done = make(chan error, 1)
	go func() { done <- w.Do(func(f *Framer) error { return sendPDU(f, 9, 0, big) }) }()
	for {
		w.mu.Lock()
		busy := w.taken == 1 && w.busy
		w.mu.Unlock()
		if busy {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // into the write, whose end waits for the peer
	return big, done
}

// TestWriterNoWaitBehindSender: while the sender is stuck writing, other
// Do calls return without waiting for it, and the sender writes all their
// PDUs, in order, in one more write call; a Sync waits for them.
func TestWriterNoWaitBehindSender(t *testing.T) {
	w, _, r, _ := combiningPair(t, false)
	big, done := blockSender(t, w)
	for seq := 1; seq <= 20; seq++ {
		b := make([]byte, sizes[seq%len(sizes)])
		pattern(b, 9, seq)
		returned := make(chan error, 1)
		go func() { returned <- w.Do(func(f *Framer) error { return sendPDU(f, 9, seq, b) }) }()
		select {
		case err := <-returned:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a Do behind a stuck sender waited for it")
		}
	}
	synced := make(chan error, 1)
	go func() { synced <- w.Sync() }()
	select {
	case err := <-synced:
		t.Fatalf("Sync returned (%v) before the peer read anything", err)
	case <-time.After(20 * time.Millisecond):
	}
	for seq := 0; seq <= 20; seq++ {
		sender, got, data, err := readPDU(r)
		if err != nil || sender != 9 || got != seq {
			t.Fatalf("PDU %d: sender %d #%d, %v", seq, sender, got, err)
		}
		want := big
		if seq > 0 {
			want = make([]byte, sizes[seq%len(sizes)])
			pattern(want, 9, seq)
		}
		if !bytes.Equal(data, want) {
			t.Fatalf("PDU %d carries other data", seq)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	if w.written != 2 {
		t.Fatalf("%d write batches, want 2: the stuck one, then the 20 PDUs framed behind it", w.written)
	}
}

// TestWriterErrorMidBatch: the sender's write fails (a deadline) with
// other PDUs framed behind it. The sender and a Sync waiting for those
// PDUs get the error, every later call gets it, and the peer never sees a
// byte framed after the failure began, nor any PDU twice.
func TestWriterErrorMidBatch(t *testing.T) {
	w, c, r, _ := combiningPair(t, false)
	_, done := blockSender(t, w)
	for seq := 1; seq <= 5; seq++ {
		b := make([]byte, 100)
		if err := w.Do(func(f *Framer) error { return sendPDU(f, 9, seq, b) }); err != nil {
			t.Fatal(err)
		}
	}
	synced := make(chan error, 1)
	go func() { synced <- w.Sync() }()
	_ = c.SetWriteDeadline(time.Now())
	for name, ch := range map[string]chan error{"stuck sender": done, "Sync": synced} {
		if err := <-ch; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: %v, want the write's ErrDeadlineExceeded", name, err)
		}
	}
	_ = c.SetWriteDeadline(time.Time{})
	nop := func(f *Framer) error { return sendPDU(f, 9, 99, nil) }
	for name, call := range map[string]func() error{
		"Do":    func() error { return w.Do(nop) },
		"Defer": func() error { return w.Defer(nop) },
		"Flush": w.Flush,
		"Sync":  w.Sync,
	} {
		if err := call(); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s after a failed write: %v, want the write's error", name, err)
		}
	}
	c.Close()
	// The peer reads the big PDU's header and part of its data, then the end.
	sender, seq, _, err := readPDU(r)
	if sender != 9 || seq != 0 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("peer read sender %d #%d, %v; want #0 cut short", sender, seq, err)
	}
	if sender, seq, _, err := readPDU(r); err == nil {
		t.Fatalf("after the cut PDU the peer read sender %d's #%d", sender, seq)
	}
}

// TestRawWriterBuffers writes more buffers than one writev takes, of mixed
// sizes, through a full socket (writes complete in parts), with and without
// queueing (SetNoWait): the peer reads them in order.
func TestRawWriterBuffers(t *testing.T) {
	for _, noWait := range []bool{false, true} {
		t.Run(fmt.Sprintf("noWait=%v", noWait), func(t *testing.T) {
			c, s := tcpPair(t)
			w := NewRawWriter(c)
			if noWait {
				w.SetNoWait(func() bool { return true })
			}
			var v [][]byte
			var want []byte
			for i := range 3*maxIovecs + 7 {
				b := make([]byte, (i*131)%9000)
				pattern(b, i, i)
				v = append(v, b)
				want = append(want, b...)
			}
			got := make(chan []byte, 1)
			go func() {
				time.Sleep(20 * time.Millisecond) // let the socket fill
				b := make([]byte, len(want))
				_, _ = io.ReadFull(s, b)
				got <- b
			}()
			if err := w.WriteBuffers(v); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(<-got, want) {
				t.Fatal("the peer read other bytes, or out of order")
			}
		})
	}
}

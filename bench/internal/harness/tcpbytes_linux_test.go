package harness

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestTCPInfoOffsets checks the documented tcp_info offsets against
// x/sys's struct, which is generated from the kernel's headers.
func TestTCPInfoOffsets(t *testing.T) {
	var ti unix.TCPInfo
	if o := unsafe.Offsetof(ti.Bytes_acked); o != tcpInfoBytesAcked {
		t.Errorf("tcpi_bytes_acked at %d, want %d", o, tcpInfoBytesAcked)
	}
	if o := unsafe.Offsetof(ti.Bytes_received); o != tcpInfoBytesReceived {
		t.Errorf("tcpi_bytes_received at %d, want %d", o, tcpInfoBytesReceived)
	}
}

// TestSnapshotTCPCountsThisProcess moves bytes over a loopback
// connection of this process and finds them in the kernel's counters of
// its two ends, sizing the two directions differently so that a swapped
// sent/received fails.
func TestSnapshotTCPCountsThisProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	cl, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	defer srv.Close()
	me := []int{os.Getpid()}
	before, err := SnapshotTCP(me)
	if err != nil {
		t.Fatal(err)
	}
	const up, down = 100000, 3000
	go cl.Write(make([]byte, up))
	if _, err := io.ReadFull(srv, make([]byte, up)); err != nil {
		t.Fatal(err)
	}
	go srv.Write(make([]byte, down))
	if _, err := io.ReadFull(cl, make([]byte, down)); err != nil {
		t.Fatal(err)
	}
	after, err := SnapshotTCP(me)
	if err != nil {
		t.Fatal(err)
	}
	moved, closed := after.Since(before)
	got := moved[os.Getpid()]
	// Both ends are this process's: each direction is sent once and
	// received once (acknowledgement may trail the read by a moment).
	if got.Received != up+down || got.Sent > up+down || got.Sent < down {
		t.Fatalf("moved %+v, want %d received and at most that sent", got, up+down)
	}
	if closed != 0 {
		t.Fatalf("%d sockets closed", closed)
	}
}

func TestTCPSnapshotSince(t *testing.T) {
	before := TCPSnapshot{
		1: {PID: 10, Sent: 100, Received: 50},
		2: {PID: 10, Sent: 7, Received: 7},    // closes
		3: {PID: 11, Sent: 1000, Received: 1}, // inode reused by a new socket
	}
	after := TCPSnapshot{
		1: {PID: 10, Sent: 150, Received: 60},
		3: {PID: 12, Sent: 5, Received: 6},
		4: {PID: 11, Sent: 20, Received: 30},
	}
	moved, closed := after.Since(before)
	want := map[int]TCPBytes{10: {50, 10}, 11: {20, 30}, 12: {5, 6}}
	if len(moved) != len(want) || closed != 1 {
		t.Fatalf("moved %v closed %d", moved, closed)
	}
	for pid, w := range want {
		if moved[pid] != w {
			t.Errorf("pid %d: %+v, want %+v", pid, moved[pid], w)
		}
	}
}

// diagMsg builds one sock_diag netlink message for inode with counters
// sent and received, after an attribute of another type.
func diagMsg(inode uint32, sent, received uint64) []byte {
	ne := binary.NativeEndian
	msg := make([]byte, diagMsgLen)
	ne.PutUint32(msg[diagMsgInode:], inode)
	other := make([]byte, 4+5) // an unaligned attribute first
	ne.PutUint16(other, uint16(len(other)))
	ne.PutUint16(other[2:], 8)
	msg = append(msg, other...)
	msg = append(msg, 0, 0, 0)
	info := make([]byte, 4+232)
	ne.PutUint16(info, uint16(len(info)))
	ne.PutUint16(info[2:], inetDiagInfo)
	ne.PutUint64(info[4+tcpInfoBytesAcked:], sent)
	ne.PutUint64(info[4+tcpInfoBytesReceived:], received)
	msg = append(msg, info...)
	hdr := make([]byte, unix.NLMSG_HDRLEN)
	ne.PutUint32(hdr, uint32(len(hdr)+len(msg)))
	ne.PutUint16(hdr[4:], unix.SOCK_DIAG_BY_FAMILY)
	return append(hdr, msg...)
}

func done() []byte {
	hdr := make([]byte, unix.NLMSG_HDRLEN+4)
	binary.NativeEndian.PutUint32(hdr, uint32(len(hdr)))
	binary.NativeEndian.PutUint16(hdr[4:], unix.NLMSG_DONE)
	return hdr
}

func TestParseDiagReply(t *testing.T) {
	reply := append(append(diagMsg(7, 11, 22), diagMsg(8, 33, 44)...), done()...)
	var got []sockCounters
	end, err := parseDiagReply(reply, func(c sockCounters) { got = append(got, c) })
	if err != nil || !end {
		t.Fatalf("done %v err %v", end, err)
	}
	if len(got) != 2 || got[0] != (sockCounters{7, 11, 22}) || got[1] != (sockCounters{8, 33, 44}) {
		t.Fatalf("%+v", got)
	}
	for _, bad := range [][]byte{
		reply[:unix.NLMSG_HDRLEN+10],            // message cut short
		diagMsg(1, 1, 1)[:unix.NLMSG_HDRLEN+40], // length past the bytes
	} {
		if _, err := parseDiagReply(bad, func(sockCounters) {}); err == nil {
			t.Errorf("%d bytes: no error", len(bad))
		}
	}
}

// FuzzParseDiagReply feeds arbitrary datagrams to the sock_diag decoder:
// it must never panic, and what it reports must lie inside them.
func FuzzParseDiagReply(f *testing.F) {
	f.Add(append(diagMsg(7, 11, 22), done()...))
	f.Add(diagMsg(1, 2, 3)[:90])
	f.Add(done())
	f.Fuzz(func(t *testing.T, b []byte) {
		parseDiagReply(b, func(c sockCounters) {
			if c.inode > 1<<32-1 {
				t.Fatalf("inode %d from 32 bits", c.inode)
			}
		})
	})
}

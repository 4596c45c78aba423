package harness

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// SnapshotTCP reads the counters of every TCP socket (IPv4 and IPv6)
// that the processes pids hold: it maps each process's socket inodes
// from /proc/PID/fd, then dumps all TCP sockets with their tcp_info over
// a NETLINK_SOCK_DIAG socket (what ss(8) does) and keeps theirs.
func SnapshotTCP(pids []int) (TCPSnapshot, error) {
	owner := map[uint64]int{}
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd"
		fds, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("bench: sockets of process %d: %w", pid, err)
		}
		for _, fd := range fds {
			link, err := os.Readlink(dir + "/" + fd.Name())
			if err != nil {
				continue // closed since ReadDir
			}
			if s, ok := strings.CutPrefix(link, "socket:["); ok {
				if ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
					owner[ino] = pid
				}
			}
		}
	}
	snap := TCPSnapshot{}
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		if err := dumpTCP(family, func(c sockCounters) {
			if pid, ok := owner[c.inode]; ok {
				snap[c.inode] = TCPSocket{PID: pid, Sent: c.sent, Received: c.received}
			}
		}); err != nil {
			return nil, err
		}
	}
	return snap, nil
}

// Netlink sock_diag layout (include/uapi/linux/inet_diag.h), host byte
// order except the ports and addresses, which this code does not read.
const (
	// inet_diag_req_v2: family u8 @0, protocol u8 @1, ext u8 @2, pad
	// u8 @3, states u32 @4, inet_diag_sockid @8 (48 bytes).
	diagReqLen = 56
	// inet_diag_msg: family, state, timer, retrans u8 @0-3,
	// inet_diag_sockid @4 (48 bytes), expires u32 @52, rqueue u32 @56,
	// wqueue u32 @60, uid u32 @64, inode u32 @68; attributes follow.
	diagMsgLen   = 72
	diagMsgInode = 68
	// inetDiagInfo is the attribute carrying struct tcp_info.
	inetDiagInfo = 2
	// struct tcp_info: tcpi_bytes_acked u64 @120, tcpi_bytes_received
	// u64 @128 (Linux 4.1 and later).
	tcpInfoBytesAcked    = 120
	tcpInfoBytesReceived = 128
	tcpInfoMinLen        = tcpInfoBytesReceived + 8
)

// sockCounters is one socket as the kernel reported it.
type sockCounters struct {
	inode          uint64
	sent, received uint64
}

// dumpTCP asks the kernel for every TCP socket of family with its
// tcp_info, and calls fn for each.
func dumpTCP(family uint8, fn func(sockCounters)) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_INET_DIAG)
	if err != nil {
		return fmt.Errorf("bench: sock_diag: %w", err)
	}
	defer unix.Close(fd)
	req := make([]byte, unix.NLMSG_HDRLEN+diagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1) // sequence number
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1], r[2] = family, unix.IPPROTO_TCP, 1<<(inetDiagInfo-1)
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("bench: sock_diag request: %w", err)
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("bench: sock_diag: %w", err)
		}
		done, err := parseDiagReply(buf[:n], fn)
		if err != nil || done {
			return err
		}
	}
}

// parseDiagReply decodes one datagram of a sock_diag dump: netlink
// messages, each a header (length u32 @0, type u16 @4, flags u16 @6,
// sequence u32 @8, port u32 @12) and its payload, 4-byte aligned. It
// calls fn for each socket with counters and reports whether the dump
// ended (NLMSG_DONE).
func parseDiagReply(b []byte, fn func(sockCounters)) (done bool, err error) {
	ne := binary.NativeEndian
	for len(b) >= unix.NLMSG_HDRLEN {
		l, typ := int(ne.Uint32(b)), ne.Uint16(b[4:])
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			return false, fmt.Errorf("bench: sock_diag message of length %d in %d bytes", l, len(b))
		}
		data := b[unix.NLMSG_HDRLEN:l]
		switch typ {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if len(data) >= 4 {
				if errno := int32(ne.Uint32(data)); errno < 0 {
					return false, fmt.Errorf("bench: sock_diag: %w", unix.Errno(-errno))
				}
			}
			return false, errors.New("bench: sock_diag: error reply")
		case unix.SOCK_DIAG_BY_FAMILY:
			c, ok, err := parseDiagMsg(data)
			if err != nil {
				return false, err
			}
			if ok {
				fn(c)
			}
		}
		next := (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if next >= len(b) {
			break
		}
		b = b[next:]
	}
	return false, nil
}

// parseDiagMsg decodes one inet_diag_msg and its INET_DIAG_INFO
// attribute. ok is false for a socket without one (a listener or a
// socket in TIME_WAIT has no tcp_info).
func parseDiagMsg(b []byte) (c sockCounters, ok bool, err error) {
	if len(b) < diagMsgLen {
		return c, false, fmt.Errorf("bench: sock_diag message of %d bytes, want at least %d", len(b), diagMsgLen)
	}
	ne := binary.NativeEndian
	c.inode = uint64(ne.Uint32(b[diagMsgInode:]))
	for a := b[diagMsgLen:]; len(a) >= unix.SizeofRtAttr; {
		l, typ := int(ne.Uint16(a)), ne.Uint16(a[2:])
		if l < unix.SizeofRtAttr || l > len(a) {
			return c, false, fmt.Errorf("bench: sock_diag attribute of length %d in %d bytes", l, len(a))
		}
		if typ == inetDiagInfo {
			info := a[unix.SizeofRtAttr:l]
			if len(info) < tcpInfoMinLen {
				return c, false, fmt.Errorf("bench: tcp_info of %d bytes has no byte counters (kernel before 4.1?)", len(info))
			}
			c.sent, c.received = ne.Uint64(info[tcpInfoBytesAcked:]), ne.Uint64(info[tcpInfoBytesReceived:])
			return c, true, nil
		}
		next := (l + unix.RTA_ALIGNTO - 1) &^ (unix.RTA_ALIGNTO - 1)
		if next >= len(a) {
			break
		}
		a = a[next:]
	}
	return c, false, nil
}

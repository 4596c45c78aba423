package harness

// TCPBytes is what one process's TCP sockets moved: bytes sent (and
// acknowledged by the peer) and bytes received, the kernel's per-socket
// counters (tcp_info's tcpi_bytes_acked and tcpi_bytes_received).
type TCPBytes struct {
	Sent     uint64 `json:"sent"`
	Received uint64 `json:"received"`
}

// TCPSocket is one socket's counters and the process holding it.
type TCPSocket struct {
	PID            int
	Sent, Received uint64
}

// TCPSnapshot is the TCP sockets a set of processes held at one moment,
// by socket inode (unique among the sockets alive at once).
type TCPSnapshot map[uint64]TCPSocket

// Since returns, per process, what its sockets moved from before to s: a
// socket in both counts its growth, a socket opened in between all it
// moved. A socket closed in between is lost (its counters went with it);
// closed counts those, so a report can say how many.
func (s TCPSnapshot) Since(before TCPSnapshot) (moved map[int]TCPBytes, closed int) {
	moved = map[int]TCPBytes{}
	for ino, a := range s {
		b := before[ino]
		if b.PID != a.PID || b.Sent > a.Sent || b.Received > a.Received {
			// A new socket, or a reused inode number: all of it is new.
			b = TCPSocket{}
		}
		m := moved[a.PID]
		m.Sent += a.Sent - b.Sent
		m.Received += a.Received - b.Received
		moved[a.PID] = m
	}
	for ino := range before {
		if _, ok := s[ino]; !ok {
			closed++
		}
	}
	return moved, closed
}

package interop

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// NVMe/TCP initialization PDUs (NVMe/TCP transport spec, ICReq/ICResp): a
// tiny hand-made encoder so the harness can probe a target without depending
// on the packages under test.
const (
	pduICReq  = 0x00
	pduICResp = 0x01
	icPDULen  = 128
)

// ICReq returns a 128-byte ICReq: PFV 0, HPDA 0, no digests, MAXR2T 0.
func ICReq() []byte {
	b := make([]byte, icPDULen)
	b[0] = pduICReq                                // PDU type
	b[1] = 0                                       // flags
	b[2] = icPDULen                                // HLEN
	b[3] = 0                                       // PDO
	binary.LittleEndian.PutUint32(b[4:], icPDULen) // PLEN
	binary.LittleEndian.PutUint16(b[8:], 0)        // PFV
	b[10] = 0                                      // HPDA
	b[11] = 0                                      // DGST: no header/data digest
	binary.LittleEndian.PutUint32(b[12:], 0)       // MAXR2T (0's based: 1)
	return b
}

// ICResp is a decoded ICResp PDU.
type ICResp struct {
	Type, Flags, HLen, PDO uint8
	PLen                   uint32
	PFV                    uint16
	CPDA                   uint8
	HeaderDigest           bool
	DataDigest             bool
	MaxH2CData             uint32
}

// ParseICResp decodes and checks a 128-byte ICResp.
func ParseICResp(b []byte) (ICResp, error) {
	if len(b) < icPDULen {
		return ICResp{}, fmt.Errorf("ICResp: %d bytes, want %d", len(b), icPDULen)
	}
	r := ICResp{
		Type:         b[0],
		Flags:        b[1],
		HLen:         b[2],
		PDO:          b[3],
		PLen:         binary.LittleEndian.Uint32(b[4:]),
		PFV:          binary.LittleEndian.Uint16(b[8:]),
		CPDA:         b[10],
		HeaderDigest: b[11]&1 != 0,
		DataDigest:   b[11]&2 != 0,
		MaxH2CData:   binary.LittleEndian.Uint32(b[12:]),
	}
	switch {
	case r.Type != pduICResp:
		return r, fmt.Errorf("ICResp: PDU type %#02x, want %#02x", r.Type, pduICResp)
	case r.HLen != icPDULen || r.PLen != icPDULen:
		return r, fmt.Errorf("ICResp: hlen %d plen %d, want %d", r.HLen, r.PLen, icPDULen)
	case r.PFV != 0:
		return r, fmt.Errorf("ICResp: PFV %d, want 0", r.PFV)
	}
	return r, nil
}

// ProbeICReq connects to an NVMe/TCP endpoint at addr, sends an ICReq and
// returns the decoded ICResp. It only checks the connection handshake; the
// connection is closed afterwards.
func ProbeICReq(ctx context.Context, addr string) (ICResp, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return ICResp{}, err
	}
	defer conn.Close()
	deadline := time.Now().Add(30 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	conn.SetDeadline(deadline)
	if _, err := conn.Write(ICReq()); err != nil {
		return ICResp{}, fmt.Errorf("sending ICReq: %w", err)
	}
	buf := make([]byte, icPDULen)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return ICResp{}, fmt.Errorf("reading ICResp: %w", err)
	}
	return ParseICResp(buf)
}

// ICRespRecorder is a listener that records what a target answers each
// connection's ICReq with: the first 128 bytes the target writes on it.
// A test serves through it to learn what was negotiated (digests) with a
// host it cannot ask, such as a Linux kernel.
type ICRespRecorder struct {
	net.Listener
	mu    sync.Mutex
	resps []ICResp
}

// Accept wraps the connection so its first 128 written bytes are kept.
func (l *ICRespRecorder) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, l: l}, nil
}

// Resps returns the ICResps sent so far, in the order they completed.
func (l *ICRespRecorder) Resps() []ICResp {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.resps)
}

type recordingConn struct {
	net.Conn
	l    *ICRespRecorder
	head []byte
}

func (c *recordingConn) Write(p []byte) (int, error) {
	if len(c.head) < icPDULen {
		c.head = append(c.head, p[:min(len(p), icPDULen-len(c.head))]...)
		if len(c.head) == icPDULen {
			if r, err := ParseICResp(c.head); err == nil {
				c.l.mu.Lock()
				c.l.resps = append(c.l.resps, r)
				c.l.mu.Unlock()
			}
		}
	}
	return c.Conn.Write(p)
}

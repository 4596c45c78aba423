package tcp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/nearstore/nearstore/nvme"
)

// Role says which end of a connection a Framer serves. It decides which PDU
// types may arrive: a controller receives only host-to-controller PDUs.
type Role uint8

// Roles.
const (
	RoleController Role = iota
	RoleHost
)

// ErrDataDigest reports a data digest mismatch. It is not fatal to the
// connection: the data was consumed whole, and the command it belongs to
// fails with a transient transport error.
var ErrDataDigest = errors.New("nvme/tcp: data digest mismatch")

// FatalError is a transport error that ends the connection. The receiver
// sends a TermReq carrying FES, FEI and the offending header, then closes.
type FatalError struct {
	FES    uint16
	FEI    uint32
	Header []byte // the offending PDU header, up to MaxTermReqData bytes
	Reason string
}

func (e *FatalError) Error() string {
	return fmt.Sprintf("nvme/tcp: fatal transport error (fes %d, fei %d): %s", e.FES, e.FEI, e.Reason)
}

func fatal(fes uint16, fei uint32, hdr []byte, format string, args ...any) *FatalError {
	if len(hdr) > MaxTermReqData {
		hdr = hdr[:MaxTermReqData]
	}
	return &FatalError{FES: fes, FEI: fei, Header: append([]byte(nil), hdr...), Reason: fmt.Sprintf(format, args...)}
}

// Header is a received PDU's header: the common header fields plus the raw
// PDU-specific bytes, which the typed accessors decode. It is valid until the
// next ReadHeader.
type Header struct {
	Type    uint8
	Flags   uint8
	HLen    uint8
	PDO     uint8
	PLen    uint32
	DataLen int // bytes of data that follow; read them with ReadData

	raw []byte
}

// Raw returns the HLEN header bytes as received.
func (h *Header) Raw() []byte { return h.raw }

// ICReq decodes an ICReq header.
func (h *Header) ICReq() (p ICReq) { p.unmarshal(h.raw); return }

// ICResp decodes an ICResp header.
func (h *Header) ICResp() (p ICResp) { p.unmarshal(h.raw); return }

// Command decodes a CapsuleCmd's submission queue entry.
func (h *Header) Command() (c nvme.Command) {
	_ = c.Unmarshal(h.raw[CommonHeaderSize:])
	return
}

// Completion decodes a CapsuleResp's completion queue entry.
func (h *Header) Completion() (c nvme.Completion) {
	_ = c.Unmarshal(h.raw[CommonHeaderSize:])
	return
}

// Data decodes the header of an H2CData, C2HData or R2T.
func (h *Header) Data() (p DataHeader) { p.unmarshal(h.raw); return }

// TermReq decodes a TermReq header.
func (h *Header) TermReq() (p TermReq) { p.unmarshal(h.raw); return }

// Framer reads and writes PDUs on one connection. Reading is for one
// goroutine; writing goes through Writer when several goroutines send.
type Framer struct {
	r    *bufio.Reader
	out  io.Writer // the connection, as written
	role Role

	// HeaderDigest and DataDigest are the digests the IC exchange enabled.
	HeaderDigest bool
	DataDigest   bool
	// SendAlign is the alignment, in bytes, of PDO in data PDUs this end
	// sends: the peer's PDA plus one, times four.
	SendAlign int
	// MaxCapsuleData bounds in-capsule data a controller accepts, and
	// MaxData the data of any other received PDU. Larger is a fatal error.
	MaxCapsuleData int
	MaxData        int

	hdrBuf  [ICHeaderSize + DigestSize]byte
	cur     Header
	pending int // bytes of the current PDU not yet consumed (padding + data + digest)
	padLeft int
	ddgst   bool
	wbuf    [ICHeaderSize + DigestSize + 128]byte

	// ob holds the PDUs framed and not yet written. While spliceData is
	// set, data of at least spliceMin bytes is spliced in by reference
	// instead of copied: only a caller that writes ob itself before it
	// returns (Writer.Do's sender) may set it.
	ob         outBuf
	spliceData bool
}

// NewFramer returns a framer on rw for the given role, with no digests
// negotiated yet and bufSize bytes of read buffering. What it writes is
// buffered until Flush (or a Writer) sends it, in one write call per flush:
// one writev(2) when rw is a Duplex whose W is a RawWriter.
func NewFramer(rw io.ReadWriter, role Role, bufSize int) *Framer {
	return &Framer{
		r:              bufio.NewReaderSize(rw, bufSize),
		out:            rw,
		role:           role,
		SendAlign:      4,
		MaxCapsuleData: 8192,
		MaxData:        1 << 20,
	}
}

func (f *Framer) accepts(t uint8) bool {
	switch t {
	case TypeICReq, TypeCapsuleCmd, TypeH2CData, TypeH2CTermReq:
		return f.role == RoleController
	case TypeICResp, TypeCapsuleResp, TypeC2HData, TypeR2T, TypeC2HTermReq:
		return f.role == RoleHost
	}
	return false
}

// ReadHeader reads the next PDU's header and checks it: a type this end
// may receive, the HLEN of that type, flags that match the negotiated
// digests, a PDO and PLEN that fit, the header digest. Any unread data of the
// previous PDU is skipped first. A *FatalError means the connection must be
// terminated; any other error is the stream's.
func (f *Framer) ReadHeader() (*Header, error) {
	if f.pending > 0 {
		if err := f.ReadData(nil); err != nil && !errors.Is(err, ErrDataDigest) {
			return nil, err
		}
	}
	ch := f.hdrBuf[:CommonHeaderSize]
	if _, err := io.ReadFull(f.r, ch); err != nil {
		return nil, err
	}
	h := &f.cur
	*h = Header{Type: ch[0], Flags: ch[1], HLen: ch[2], PDO: ch[3], PLen: binary.LittleEndian.Uint32(ch[4:])}
	if !f.accepts(h.Type) {
		return nil, fatal(FESInvalidHeaderField, 0, ch, "unexpected PDU type 0x%02x", h.Type)
	}
	want, _ := hlenOf(h.Type)
	if int(h.HLen) != want {
		return nil, fatal(FESInvalidHeaderField, 2, ch, "PDU type 0x%02x with HLEN %d, want %d", h.Type, h.HLen, want)
	}
	hd := f.HeaderDigest && carriesHeaderDigest(h.Type)
	if hd != (h.Flags&FlagHDGST != 0) {
		return nil, fatal(FESInvalidHeaderField, 1, ch, "HDGSTF flag %v, header digest negotiated %v", !hd, hd)
	}
	hdrEnd := want
	if hd {
		hdrEnd += DigestSize
	}
	if h.PLen < uint32(hdrEnd) {
		return nil, fatal(FESInvalidHeaderField, 4, ch, "PLEN %d shorter than header %d", h.PLen, hdrEnd)
	}
	if _, err := io.ReadFull(f.r, f.hdrBuf[CommonHeaderSize:hdrEnd]); err != nil {
		return nil, unexpectedEOF(err)
	}
	h.raw = f.hdrBuf[:want]
	if hd {
		got := binary.LittleEndian.Uint32(f.hdrBuf[want:])
		if got != CRC32C(h.raw) {
			return nil, fatal(FESHeaderDigestError, 0, h.raw, "header digest mismatch")
		}
	}
	return h, f.checkData(h, hdrEnd)
}

// checkData validates the data layout the header announces and arms
// ReadData for it.
func (f *Framer) checkData(h *Header, hdrEnd int) error {
	f.pending, f.padLeft, f.ddgst = 0, 0, false
	rest := int(h.PLen) - hdrEnd
	switch h.Type {
	case TypeICReq, TypeICResp:
		if h.PLen != ICHeaderSize || h.PDO != 0 {
			return fatal(FESInvalidHeaderField, 4, h.raw, "IC PDU with PLEN %d PDO %d", h.PLen, h.PDO)
		}
		return nil
	case TypeH2CTermReq, TypeC2HTermReq:
		// The data (the offending header) follows HLEN directly.
		if rest > MaxTermReqData+24 {
			return fatal(FESInvalidHeaderField, 4, h.raw, "TermReq PLEN %d too long", h.PLen)
		}
		h.DataLen, f.pending = rest, rest
		return nil
	case TypeCapsuleResp, TypeR2T:
		if rest != 0 || h.Flags&FlagDDGST != 0 {
			return fatal(FESInvalidHeaderField, 4, h.raw, "PDU type 0x%02x carries %d bytes of data", h.Type, rest)
		}
		return nil
	}
	// CapsuleCmd, H2CData, C2HData: data at PDO, then maybe a data digest.
	if rest == 0 {
		if h.Flags&FlagDDGST != 0 || (h.Type != TypeCapsuleCmd) {
			return fatal(FESInvalidHeaderField, 4, h.raw, "data PDU without data")
		}
		return nil
	}
	dd := f.DataDigest
	if dd != (h.Flags&FlagDDGST != 0) {
		return fatal(FESInvalidHeaderField, 1, h.raw, "DDGSTF flag %v, data digest negotiated %v", !dd, dd)
	}
	if int(h.PDO) < hdrEnd || uint32(h.PDO) > h.PLen {
		return fatal(FESInvalidHeaderField, 3, h.raw, "PDO %d outside [%d, %d]", h.PDO, hdrEnd, h.PLen)
	}
	n := int(h.PLen) - int(h.PDO)
	if dd {
		n -= DigestSize
	}
	if n <= 0 {
		return fatal(FESInvalidHeaderField, 4, h.raw, "PLEN %d leaves no room for data at PDO %d", h.PLen, h.PDO)
	}
	switch h.Type {
	case TypeCapsuleCmd:
		if n > f.MaxCapsuleData {
			return fatal(FESInvalidHeaderField, 4, h.raw, "in-capsule data %d exceeds %d", n, f.MaxCapsuleData)
		}
	case TypeH2CData, TypeC2HData:
		dh := h.Data()
		if int(dh.Length) != n {
			return fatal(FESInvalidHeaderField, 16, h.raw, "DATAL %d but PDU holds %d bytes", dh.Length, n)
		}
		if n > f.MaxData {
			return fatal(FESDataLimitExceeded, 16, h.raw, "data PDU of %d bytes exceeds %d", n, f.MaxData)
		}
	}
	h.DataLen = n
	f.padLeft = int(h.PDO) - hdrEnd
	f.ddgst = dd
	f.pending = int(h.PLen) - hdrEnd
	return nil
}

// ReadData consumes the current PDU's data into dst, which must be DataLen
// bytes long, or discards it when dst is nil. It returns ErrDataDigest when
// the data digest does not match; the stream stays in sync either way.
func (f *Framer) ReadData(dst []byte) error {
	if f.pending == 0 {
		return nil
	}
	if f.padLeft > 0 {
		if _, err := f.r.Discard(f.padLeft); err != nil {
			return unexpectedEOF(err)
		}
		f.pending -= f.padLeft
		f.padLeft = 0
	}
	n := f.cur.DataLen
	var crc uint32
	if dst == nil {
		// Discard, still computing the digest so a damaged stream is noticed.
		for left := n; left > 0; {
			chunk, err := f.r.Peek(min(left, f.r.Size()))
			if len(chunk) == 0 && err != nil {
				return unexpectedEOF(err)
			}
			if f.ddgst {
				crc = crc32Update(crc, chunk)
			}
			_, _ = f.r.Discard(len(chunk))
			left -= len(chunk)
		}
	} else {
		if len(dst) != n {
			return fmt.Errorf("nvme/tcp: ReadData into %d bytes, PDU has %d", len(dst), n)
		}
		if _, err := io.ReadFull(f.r, dst); err != nil {
			return unexpectedEOF(err)
		}
		if f.ddgst {
			crc = CRC32C(dst)
		}
	}
	f.pending -= n
	if f.ddgst {
		var d [DigestSize]byte
		if _, err := io.ReadFull(f.r, d[:]); err != nil {
			return unexpectedEOF(err)
		}
		f.pending -= DigestSize
		if binary.LittleEndian.Uint32(d[:]) != crc {
			return ErrDataDigest
		}
	}
	f.pending = 0
	return nil
}

func crc32Update(c uint32, b []byte) uint32 { return crc32.Update(c, castagnoli, b) }

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// writePDU frames one PDU: hdr holds HLEN bytes with the PDU-specific part
// filled; writePDU fills the common header, adds the digests the connection
// negotiated, pads data to SendAlign, and buffers it. Call Flush to send.
func (f *Framer) writePDU(typ, flags uint8, hdr []byte, data []byte) error {
	hlen := len(hdr)
	hd := f.HeaderDigest && carriesHeaderDigest(typ)
	dd := f.DataDigest && carriesDataDigest(typ) && len(data) > 0
	start := hlen
	if hd {
		start += DigestSize
		flags |= FlagHDGST
	}
	pdo, plen := 0, start
	if len(data) > 0 {
		if typ == TypeH2CTermReq || typ == TypeC2HTermReq {
			pdo, plen = 0, start+len(data)
		} else {
			pdo = (start + f.SendAlign - 1) / f.SendAlign * f.SendAlign
			if pdo > 255 {
				return fmt.Errorf("nvme/tcp: PDO %d does not fit a byte", pdo)
			}
			plen = pdo + len(data)
		}
	}
	if dd {
		plen += DigestSize
		flags |= FlagDDGST
	}
	hdr[0], hdr[1], hdr[2], hdr[3] = typ, flags, uint8(hlen), uint8(pdo)
	binary.LittleEndian.PutUint32(hdr[4:], uint32(plen))
	out := f.wbuf[:0]
	out = append(out, hdr...)
	if hd {
		// The digest of the copy: hdr itself stays on its caller's
		// stack (a CRC of it would make every header escape).
		out = binary.LittleEndian.AppendUint32(out, CRC32C(out))
	}
	for len(data) > 0 && pdo > len(out) {
		out = append(out, 0)
	}
	f.ob.add(out)
	if len(data) == 0 {
		return nil
	}
	if f.spliceData && len(data) >= spliceMin {
		f.ob.splice(data)
	} else {
		f.ob.add(data)
	}
	if dd {
		var d [DigestSize]byte
		binary.LittleEndian.PutUint32(d[:], CRC32C(data))
		f.ob.add(d[:])
	}
	return nil
}

// Flush sends what is buffered. After an error what was buffered is
// dropped: the stream is broken.
func (f *Framer) Flush() error {
	if f.ob.empty() {
		return nil
	}
	err := f.ob.writeTo(f.out)
	f.ob.reset()
	return err
}

// WriteICReq buffers an ICReq.
func (f *Framer) WriteICReq(p ICReq) error {
	var b [ICHeaderSize]byte
	p.marshal(b[:])
	return f.writePDU(TypeICReq, 0, b[:], nil)
}

// WriteICResp buffers an ICResp.
func (f *Framer) WriteICResp(p ICResp) error {
	var b [ICHeaderSize]byte
	p.marshal(b[:])
	return f.writePDU(TypeICResp, 0, b[:], nil)
}

// WriteCapsuleCmd buffers a command capsule with optional in-capsule data.
func (f *Framer) WriteCapsuleCmd(c *nvme.Command, data []byte) error {
	var b [CapsuleCmdHLen]byte
	c.Marshal(b[CommonHeaderSize:])
	return f.writePDU(TypeCapsuleCmd, 0, b[:], data)
}

// WriteCapsuleResp buffers a response capsule.
func (f *Framer) WriteCapsuleResp(c *nvme.Completion) error {
	var b [CapsuleRespHLen]byte
	c.Marshal(b[CommonHeaderSize:])
	return f.writePDU(TypeCapsuleResp, 0, b[:], nil)
}

// WriteH2CData buffers host-to-controller data answering an R2T.
func (f *Framer) WriteH2CData(h DataHeader, last bool, data []byte) error {
	var b [DataHLen]byte
	h.Length = uint32(len(data))
	h.marshal(b[:])
	var flags uint8
	if last {
		flags = FlagLastPDU
	}
	return f.writePDU(TypeH2CData, flags, b[:], data)
}

// WriteC2HData buffers controller-to-host data. success may only be set on
// the last PDU and tells the host no CapsuleResp follows.
func (f *Framer) WriteC2HData(h DataHeader, last, success bool, data []byte) error {
	var b [DataHLen]byte
	h.TTag = 0
	h.Length = uint32(len(data))
	h.marshal(b[:])
	var flags uint8
	if last {
		flags |= FlagLastPDU
		if success {
			flags |= FlagSuccess
		}
	}
	return f.writePDU(TypeC2HData, flags, b[:], data)
}

// WriteR2T buffers a Ready to Transfer.
func (f *Framer) WriteR2T(h DataHeader) error {
	var b [R2THLen]byte
	h.marshal(b[:])
	return f.writePDU(TypeR2T, 0, b[:], nil)
}

// WriteTermReq buffers a TermReq: C2HTermReq from a controller, H2CTermReq
// from a host. hdr is the offending PDU header, truncated as the spec allows.
func (f *Framer) WriteTermReq(p TermReq, hdr []byte) error {
	typ := uint8(TypeC2HTermReq)
	if f.role == RoleHost {
		typ = TypeH2CTermReq
	}
	if len(hdr) > MaxTermReqData {
		hdr = hdr[:MaxTermReqData]
	}
	var b [TermReqHLen]byte
	p.marshal(b[:])
	return f.writePDU(typ, 0, b[:], hdr)
}

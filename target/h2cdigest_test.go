package target

import (
	"bytes"
	"testing"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
)

// TestH2CDataDigestError: a write too large for the capsule moves its data
// in H2CData PDUs after an R2T; one of them with a bad data digest fails
// the command with Transient Transport Error, writes nothing, and leaves
// the queue up (the capsule path's rule, TestDataDigestErrorIsNotFatal).
func TestH2CDataDigestError(t *testing.T) {
	_, addr := startServer(t, Config{})
	a := adminQueue(t, addr, testNQN)
	q := ioQueue(t, addr, a, 1, tcp.DigestHeader|tcp.DigestData)
	const blocks = 64 // 32 KiB: past the in-capsule limit, so R2T
	before := readBack(t, q, 0, blocks)
	data := pattern(blocks*512, 9)

	cmd := rw(nvme.IOWrite, 1, 0, blocks)
	cmd.CID = q.nextCID()
	cmd.DPTR = nvme.SGL{Length: uint32(len(data)), Type: nvme.SGLTransportDataBlock}
	q.send(cmd, nil)
	h := q.recv()
	if h.Type != tcp.TypeR2T {
		t.Fatalf("PDU type %#x, want R2T", h.Type)
	}
	r2t := h.Data()
	// Frame the H2CData with a good digest, then damage one data byte;
	// the buffer is sized unlike the transfer, so a check against the
	// wrong length shows.
	var buf bytes.Buffer
	f := tcp.NewFramer(&buf, tcp.RoleHost, 1<<20)
	f.HeaderDigest, f.DataDigest = true, true
	n := min(uint32(q.maxH2C), r2t.Length)
	must(t, f.WriteH2CData(tcp.DataHeader{CCCID: r2t.CCCID, TTag: r2t.TTag, Offset: r2t.Offset}, n == r2t.Length, data[r2t.Offset:r2t.Offset+n]))
	must(t, f.Flush())
	b := buf.Bytes()
	b[len(b)-100] ^= 0xff
	if _, err := q.conn.Write(b); err != nil {
		t.Fatal(err)
	}
	// Whatever else the target asks for, the command ends with the
	// digest error; answer further R2Ts with good data.
	for {
		h := q.recv()
		if h.Type == tcp.TypeCapsuleResp {
			if c := h.Completion(); c.CID != cmd.CID || c.Status.Code() != nvme.StatusTransientTransport {
				t.Fatalf("completion %+v, want Transient Transport Error for CID %d", c, cmd.CID)
			}
			break
		}
		if h.Type != tcp.TypeR2T {
			t.Fatalf("PDU type %#x", h.Type)
		}
		d := h.Data()
		must(t, q.f.WriteH2CData(tcp.DataHeader{CCCID: d.CCCID, TTag: d.TTag, Offset: d.Offset}, true, data[d.Offset:d.Offset+d.Length]))
		must(t, q.f.Flush())
	}
	if got := readBack(t, q, 0, blocks); !bytes.Equal(got, before) {
		t.Fatal("a write whose data failed its digest reached the volume")
	}
	// The queue is still up: a good write of the same data lands.
	q.ok(q.exec(rw(nvme.IOWrite, 1, 0, blocks), data, nil, false))
	if got := readBack(t, q, 0, blocks); !bytes.Equal(got, data) {
		t.Fatal("the good write after the digest error did not land")
	}
}

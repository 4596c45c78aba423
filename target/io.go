package target

import (
	"encoding/binary"
	"errors"

	"github.com/nearstore/nearstore/nvme"
)

// span converts an LBA range to a byte range, refusing one that leaves the
// namespace (with overflow in mind: slba near 2^64 must not wrap).
func (ns *namespace) span(slba uint64, nlb uint64) (off, n int64, ok bool) {
	if slba > ns.blocks || nlb > ns.blocks-slba {
		return 0, 0, false
	}
	return int64(slba << ns.lbaShift), int64(nlb << ns.lbaShift), true
}

// prepareIO checks an NVM command and returns the bytes of data it needs
// from the host. ok is false when the command fails with st.
func (q *queue) prepareIO(cmd *command) (want int, st nvme.Status, ok bool) {
	sqe := &cmd.sqe
	if sqe.Opcode == nvme.IOFlush && sqe.NSID == 0xFFFFFFFF {
		return 0, 0, true
	}
	ns := q.ss.namespace(sqe.NSID)
	if ns == nil {
		return 0, nvme.StatusInvalidNamespace | nvme.DNR, false
	}
	cmd.ns = ns
	switch sqe.Opcode {
	case nvme.IORead, nvme.IOWrite:
		off, n, inRange := ns.span(sqe.SLBA(), uint64(sqe.NLB()))
		_ = off
		if !inRange {
			return 0, nvme.StatusLBAOutOfRange | nvme.DNR, false
		}
		if n > int64(q.maxXfer) {
			return 0, nvme.StatusInvalidField | nvme.DNR, false
		}
		// A task host outside its grants fails here, before an R2T asks
		// for data that would be thrown away; execIO admits it for real.
		refs, st := q.admitIO(cmd)
		refs.release()
		if st != 0 {
			return 0, st, false
		}
		if sqe.Opcode == nvme.IOWrite {
			return int(n), 0, true
		}
		return 0, 0, true
	case nvme.IODSM:
		// The data holds NR+1 ranges, but hosts may send more: Linux always
		// sends a whole 4 KiB range buffer (some devices ignore NR). Accept
		// any length from the ranges named up to 256 ranges.
		need := dsmLen(sqe)
		got := int(sqe.DPTR.Length)
		if got < need || got > 256*16 {
			return 0, nvme.StatusSGLDataLenInvalid | nvme.DNR, false
		}
		return got, 0, true
	case nvme.IOFlush, nvme.IOWriteZeroes:
		return 0, 0, true
	case nvme.IOPushdownRead, nvme.IOLambdaRead:
		cmd.bidir = true
		return 0, 0, true
	case nvme.IOLambdaWrite:
		n := int(sqe.DPTR.Length)
		if n < 64 || n > q.maxXfer {
			return 0, nvme.StatusSGLDataLenInvalid | nvme.DNR, false
		}
		return n, 0, true
	case nvme.IOReservationRegister, nvme.IOReservationAcquire, nvme.IOReservationRelease, nvme.IOReservationReport:
		return prepareReservation(cmd)
	}
	return 0, nvme.StatusInvalidOpcode | nvme.DNR, false
}

// inMemory is implemented by backends whose data lives in RAM, such as the
// volume package's mem volumes: their reads and writes never wait for a
// device.
type inMemory interface{ InMemory() bool }

// inlineMaxBytes bounds the transfers the reader runs inline. Copying more
// takes long enough that the reader should go on parsing commands meanwhile,
// and let another core do the copy.
const inlineMaxBytes = 128 << 10

// runsInline reports whether the reader goroutine should execute cmd itself
// rather than hand it to a goroutine: a read or write, not too large, of an
// in-memory backend. Everything else may block (a file, a device, a
// simulated device's modelled latency, a storage function) and would stall
// every command behind it on the connection.
func runsInline(cmd *command) bool {
	op := cmd.sqe.Opcode
	if (op != nvme.IORead && op != nvme.IOWrite) || cmd.ns == nil {
		return false
	}
	if m, ok := cmd.ns.backend.(inMemory); !ok || !m.InMemory() {
		return false
	}
	_, n, _ := cmd.ns.span(cmd.sqe.SLBA(), uint64(cmd.sqe.NLB()))
	return n <= inlineMaxBytes
}

// execIO runs an NVM command against its namespace's backend, on its own
// goroutine or, when runsInline says so, on the reader's.
func (q *queue) execIO(cmd *command) {
	sqe := &cmd.sqe
	ns := cmd.ns
	if st := q.reservationConflict(cmd); st != 0 {
		q.complete(cmd, st, 0)
		return
	}
	refs, st := q.admitIO(cmd)
	if st != 0 {
		q.complete(cmd, st, 0)
		return
	}
	defer refs.release()
	switch sqe.Opcode {
	case nvme.IORead:
		cmd.op = "read"
		off, n, _ := ns.span(sqe.SLBA(), uint64(sqe.NLB()))
		if sqe.DPTR.Type != nvme.SGLTransportDataBlock || int64(sqe.DPTR.Length) != n {
			q.complete(cmd, sgDataStatus(sqe.DPTR, n), 0)
			return
		}
		buf := q.srv.bufs.get(int(n))
		_, err := ns.backend.ReadAt(buf[:n], off)
		if err != nil {
			q.srv.bufs.put(buf)
			q.ioFailed(cmd, err, true)
			return
		}
		q.countIO(true, n)
		q.completeWith(cmd, nvme.StatusSuccess, 0, 0, buf[:n])
		q.srv.bufs.put(buf)
	case nvme.IOWrite:
		cmd.op = "write"
		off, n, _ := ns.span(sqe.SLBA(), uint64(sqe.NLB()))
		if _, err := ns.backend.WriteAt(cmd.data, off); err != nil {
			q.ioFailed(cmd, err, false)
			return
		}
		q.countIO(false, n)
		q.complete(cmd, nvme.StatusSuccess, 0)
	case nvme.IOFlush:
		cmd.op = "flush"
		var err error
		if ns == nil {
			err = q.ss.flushAll()
		} else {
			err = ns.backend.Flush()
		}
		if err != nil {
			q.ioFailed(cmd, err, false)
			return
		}
		q.complete(cmd, nvme.StatusSuccess, 0)
	case nvme.IOWriteZeroes:
		cmd.op = "write_zeroes"
		off, n, ok := ns.span(sqe.SLBA(), uint64(sqe.NLB()))
		if !ok {
			q.complete(cmd, nvme.StatusLBAOutOfRange|nvme.DNR, 0)
			return
		}
		var err error
		if sqe.CDW12&(1<<25) != 0 { // DEAC: deallocate instead of writing
			err = ns.backend.Deallocate(off, n)
		} else {
			err = ns.backend.WriteZeroes(off, n)
		}
		if err != nil {
			q.ioFailed(cmd, err, false)
			return
		}
		q.complete(cmd, nvme.StatusSuccess, 0)
	case nvme.IODSM:
		cmd.op = "dsm"
		q.complete(cmd, q.dsm(cmd), 0)
	case nvme.IOPushdownRead, nvme.IOLambdaRead, nvme.IOLambdaWrite:
		q.execFunction(cmd)
	case nvme.IOReservationRegister, nvme.IOReservationAcquire, nvme.IOReservationRelease, nvme.IOReservationReport:
		q.execReservation(cmd)
	}
}

// dsm runs Dataset Management. Its data is NR+1 ranges of 16 bytes:
// context attributes (bytes 0-3), length in blocks (4-7), starting LBA
// (8-15). Every range is checked before any is deallocated, so a bad range
// changes nothing.
func (q *queue) dsm(cmd *command) nvme.Status {
	ns := cmd.ns
	if cmd.sqe.CDW11&(1<<2) == 0 { // no Attribute Deallocate: hints only
		return nvme.StatusSuccess
	}
	type rng struct{ off, n int64 }
	data := cmd.data[:dsmLen(&cmd.sqe)]
	ranges := make([]rng, 0, len(data)/16)
	for i := 0; i+16 <= len(data); i += 16 {
		nlb := binary.LittleEndian.Uint32(data[i+4:])
		slba := binary.LittleEndian.Uint64(data[i+8:])
		off, n, ok := ns.span(slba, uint64(nlb))
		if !ok {
			return nvme.StatusLBAOutOfRange | nvme.DNR
		}
		if n > 0 {
			ranges = append(ranges, rng{off, n})
		}
	}
	for _, r := range ranges {
		if err := ns.backend.Deallocate(r.off, r.n); err != nil {
			q.log.Error("deallocate failed", "nsid", ns.id, "err", err)
			return nvme.StatusMediaWriteFault
		}
	}
	return nvme.StatusSuccess
}

// dsmLen is the bytes of the ranges a Dataset Management command names:
// NR (CDW10 bits 7:0) is zero-based.
func dsmLen(sqe *nvme.Command) int { return (int(uint8(sqe.CDW10)) + 1) * 16 }

// sgDataStatus explains why a data SGL does not fit its command.
func sgDataStatus(sgl nvme.SGL, n int64) nvme.Status {
	if sgl.Type != nvme.SGLTransportDataBlock {
		return nvme.StatusSGLTypeInvalid | nvme.DNR
	}
	return nvme.StatusSGLDataLenInvalid | nvme.DNR
}

// errOutOfRange is matched structurally so target need not import volume:
// any backend error that says so maps to LBA Out of Range.
type outOfRanger interface{ OutOfRange() bool }

func (q *queue) ioFailed(cmd *command, err error, read bool) {
	q.log.Error("backend I/O failed", "nsid", cmd.sqe.NSID, "op", cmd.op, "err", err)
	var oor outOfRanger
	st := nvme.StatusMediaWriteFault
	if read {
		st = nvme.StatusMediaReadError
	}
	if errors.As(err, &oor) && oor.OutOfRange() {
		st = nvme.StatusLBAOutOfRange | nvme.DNR
	}
	q.ctrl.smart.mediaErrors.Add(1)
	q.complete(cmd, st, 0)
}

func (q *queue) countIO(read bool, n int64) {
	sm := &q.ctrl.smart
	if read {
		sm.readCmds.Add(1)
		sm.readBlocks512.Add(uint64(n) >> 9)
	} else {
		sm.writeCmds.Add(1)
		sm.writeBlocks512.Add(uint64(n) >> 9)
	}
}

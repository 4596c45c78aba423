package target

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/nearstore/nearstore/nvme"
)

// The NVM I/O command set, with nearstore's vendor I/O commands
// (cmds_vendor.go). Every command may wait for its backend, so each runs
// on a goroutine of its own, except small reads and writes of in-memory
// backends (runsInline).
func ioCommands() map[uint8]*cmdSpec {
	read := access{resv: resvRead, grant: grantLBAs}
	write := access{resv: resvWrite, grant: grantLBAs}
	return map[uint8]*cmdSpec{
		nvme.IORead:        {label: "read", dir: dirOut, access: read, blocking: true, fast: true, check: checkReadWrite, exec: execRead},
		nvme.IOWrite:       {label: "write", dir: dirIn, access: write, changesData: true, blocking: true, fast: true, check: checkReadWrite, exec: execWrite},
		nvme.IOFlush:       {label: "flush", dir: dirNone, access: access{resv: resvWrite}, blocking: true, allNamespaces: true, exec: execFlush},
		nvme.IOWriteZeroes: {label: "write_zeroes", dir: dirNone, access: write, changesData: true, blocking: true, exec: execWriteZeroes},
		nvme.IODSM:         {label: "dsm", dir: dirIn, access: access{resv: resvWrite, grant: grantDSM}, changesData: true, blocking: true, check: checkDSM, exec: execDSM},

		nvme.IOReservationRegister: {label: "resv_register", dir: dirIn, blocking: true, check: checkResvData(nvme.ResvRegisterDataSize), exec: execResvRegister},
		nvme.IOReservationAcquire:  {label: "resv_acquire", dir: dirIn, blocking: true, check: checkResvData(nvme.ResvAcquireDataSize), exec: execResvAcquire},
		nvme.IOReservationRelease:  {label: "resv_release", dir: dirIn, blocking: true, check: checkResvData(nvme.ResvReleaseDataSize), exec: execResvRelease},
		nvme.IOReservationReport:   {label: "resv_report", dir: dirOut, blocking: true, exec: execResvReport},

		nvme.IOPushdownRead: {label: "pushdown", dir: dirBoth, access: access{resv: resvRead, grant: grantFiles}, blocking: true, exec: execFunction},
		nvme.IOLambdaRead:   {label: "lambda_read", dir: dirBoth, access: access{resv: resvRead, grant: grantFiles}, blocking: true, exec: execFunction},
		nvme.IOLambdaWrite:  {label: "lambda_write", dir: dirIn, access: access{resv: resvWrite, grant: grantFiles}, changesData: true, blocking: true, check: checkLambdaWrite, exec: execFunction},
	}
}

// span converts an LBA range to a byte range, refusing one that leaves the
// namespace (with overflow in mind: slba near 2^64 must not wrap).
func (ns *namespace) span(slba uint64, nlb uint64) (off, n int64, ok bool) {
	if slba > ns.blocks || nlb > ns.blocks-slba {
		return 0, 0, false
	}
	return int64(slba << ns.lbaShift), int64(nlb << ns.lbaShift), true
}

// checkReadWrite refuses a read or write outside the namespace, longer
// than MDTS, or from a task host outside its grants (admitted for real as
// it executes) before any data moves. A write needs its blocks' bytes.
func checkReadWrite(s *session, r *request) (int, nvme.Status) {
	_, n, inRange := r.ns.span(r.sqe.SLBA(), uint64(r.sqe.NLB()))
	if !inRange {
		return 0, nvme.StatusLBAOutOfRange | nvme.DNR
	}
	if n > int64(s.maxXfer) {
		return 0, nvme.StatusInvalidField | nvme.DNR
	}
	refs, st := s.admitIO(r)
	refs.release()
	if st != 0 {
		return 0, st
	}
	if r.sqe.Opcode == nvme.IOWrite {
		return int(n), 0
	}
	return 0, 0
}

// checkDSM: the data holds NR+1 ranges, but hosts may send more: Linux
// always sends a whole 4 KiB range buffer (some devices ignore NR). Accept
// any length from the ranges named up to 256 ranges.
func checkDSM(_ *session, r *request) (int, nvme.Status) {
	need := dsmLen(&r.sqe)
	got := int(r.sqe.DPTR.Length)
	if got < need || got > 256*16 {
		return 0, nvme.StatusSGLDataLenInvalid | nvme.DNR
	}
	return got, 0
}

// checkResvData: a reservation command brings a fixed-size data structure.
func checkResvData(n int) func(*session, *request) (int, nvme.Status) {
	return func(*session, *request) (int, nvme.Status) { return n, 0 }
}

// inMemory is implemented by backends whose data lives in RAM, such as the
// volume package's mem volumes: their reads and writes never wait for a
// device.
type inMemory interface{ InMemory() bool }

// inlineMaxBytes bounds the transfers the reader runs inline. Copying more
// takes long enough that the reader should go on parsing commands meanwhile,
// and let another core do the copy.
const inlineMaxBytes = 128 << 10

// runsInline reports whether the reader goroutine should execute r itself
// rather than hand it to a goroutine: a read or write (a fast entry), not
// too large, of an in-memory backend. Everything else may block (a file, a
// device, a simulated device's modelled latency, a storage function) and
// would stall every command behind it on the connection.
func runsInline(r *request) bool {
	if r.spec == nil || !r.spec.fast || r.ns == nil {
		return false
	}
	if m, ok := r.ns.backend.(inMemory); !ok || !m.InMemory() {
		return false
	}
	_, n, _ := r.ns.span(r.sqe.SLBA(), uint64(r.sqe.NLB()))
	return n <= inlineMaxBytes
}

func execRead(_ context.Context, s *session, r *request) completion {
	sqe := &r.sqe
	off, n, _ := r.ns.span(sqe.SLBA(), uint64(sqe.NLB()))
	if sqe.DPTR.Type != nvme.SGLTransportDataBlock || int64(sqe.DPTR.Length) != n {
		return status(sgDataStatus(sqe.DPTR))
	}
	buf := r.resultBuf(int(n))
	if _, err := r.ns.backend.ReadAt(buf, off); err != nil {
		return s.ioFailed(r, err, true)
	}
	s.countIO(true, n)
	return completion{data: buf}
}

func execWrite(_ context.Context, s *session, r *request) completion {
	off, n, _ := r.ns.span(r.sqe.SLBA(), uint64(r.sqe.NLB()))
	if _, err := r.ns.backend.WriteAt(r.data, off); err != nil {
		return s.ioFailed(r, err, false)
	}
	s.countIO(false, n)
	return completion{}
}

// execFlush flushes the namespace, or every namespace for NSID FFFFFFFFh.
func execFlush(_ context.Context, s *session, r *request) completion {
	var err error
	if r.ns == nil {
		err = s.ss.flushAll()
	} else {
		err = r.ns.backend.Flush()
	}
	if err != nil {
		return s.ioFailed(r, err, false)
	}
	return completion{}
}

func execWriteZeroes(_ context.Context, s *session, r *request) completion {
	sqe := &r.sqe
	off, n, ok := r.ns.span(sqe.SLBA(), uint64(sqe.NLB()))
	if !ok {
		return status(nvme.StatusLBAOutOfRange | nvme.DNR)
	}
	var err error
	if sqe.CDW12&(1<<25) != 0 { // DEAC: deallocate instead of writing
		err = r.ns.backend.Deallocate(off, n)
	} else {
		err = r.ns.backend.WriteZeroes(off, n)
	}
	if err != nil {
		return s.ioFailed(r, err, false)
	}
	return completion{}
}

// execDSM runs Dataset Management. Its data is NR+1 ranges of 16 bytes:
// context attributes (bytes 0-3), length in blocks (4-7), starting LBA
// (8-15). Every range is checked before any is deallocated, so a bad range
// changes nothing.
func execDSM(_ context.Context, s *session, r *request) completion {
	ns := r.ns
	if r.sqe.CDW11&(1<<2) == 0 { // no Attribute Deallocate: hints only
		return completion{}
	}
	type rng struct{ off, n int64 }
	data := r.data[:dsmLen(&r.sqe)]
	ranges := make([]rng, 0, len(data)/16)
	for i := 0; i+16 <= len(data); i += 16 {
		nlb := binary.LittleEndian.Uint32(data[i+4:])
		slba := binary.LittleEndian.Uint64(data[i+8:])
		off, n, ok := ns.span(slba, uint64(nlb))
		if !ok {
			return status(nvme.StatusLBAOutOfRange | nvme.DNR)
		}
		if n > 0 {
			ranges = append(ranges, rng{off, n})
		}
	}
	for _, g := range ranges {
		if err := ns.backend.Deallocate(g.off, g.n); err != nil {
			s.log.Error("deallocate failed", "nsid", ns.id, "err", err)
			return status(nvme.StatusMediaWriteFault)
		}
	}
	return completion{}
}

// dsmLen is the bytes of the ranges a Dataset Management command names:
// NR (CDW10 bits 7:0) is zero-based.
func dsmLen(sqe *nvme.Command) int { return (int(uint8(sqe.CDW10)) + 1) * 16 }

// sgDataStatus explains why a data SGL does not fit its command.
func sgDataStatus(sgl nvme.SGL) nvme.Status {
	if sgl.Type != nvme.SGLTransportDataBlock {
		return nvme.StatusSGLTypeInvalid | nvme.DNR
	}
	return nvme.StatusSGLDataLenInvalid | nvme.DNR
}

// errOutOfRange is matched structurally so target need not import volume:
// any backend error that says so maps to LBA Out of Range.
type outOfRanger interface{ OutOfRange() bool }

// ioFailed completes a command whose backend call failed.
func (s *session) ioFailed(r *request, err error, read bool) completion {
	s.log.Error("backend I/O failed", "nsid", r.sqe.NSID, "op", r.op, "err", err)
	var oor outOfRanger
	st := nvme.StatusMediaWriteFault
	if read {
		st = nvme.StatusMediaReadError
	}
	if errors.As(err, &oor) && oor.OutOfRange() {
		st = nvme.StatusLBAOutOfRange | nvme.DNR
	}
	s.ctrl.smart.mediaErrors.Add(1)
	return status(st)
}

func (s *session) countIO(read bool, n int64) {
	sm := &s.ctrl.smart
	if read {
		sm.readCmds.Add(1)
		sm.readBlocks512.Add(uint64(n) >> 9)
	} else {
		sm.writeCmds.Add(1)
		sm.writeBlocks512.Add(uint64(n) >> 9)
	}
}

func execResvRegister(_ context.Context, s *session, r *request) completion {
	le := binary.LittleEndian
	st := r.ns.resv.register(s.ctrl.hostNQN, s.ctrl.hostID, r.sqe.CDW10, le.Uint64(r.data), le.Uint64(r.data[8:]))
	return s.reservationDone(r, st)
}

func execResvAcquire(_ context.Context, s *session, r *request) completion {
	le := binary.LittleEndian
	st := r.ns.resv.acquire(s.ctrl.hostNQN, r.sqe.CDW10, le.Uint64(r.data), le.Uint64(r.data[8:]))
	return s.reservationDone(r, st)
}

func execResvRelease(_ context.Context, s *session, r *request) completion {
	st := r.ns.resv.release(s.ctrl.hostNQN, r.sqe.CDW10, binary.LittleEndian.Uint64(r.data))
	return s.reservationDone(r, st)
}

// reservationDone logs a reservation change, or its refusal.
func (s *session) reservationDone(r *request, st nvme.Status) completion {
	if st.OK() {
		s.log.Info("reservation", "op", r.op, "host", s.ctrl.hostNQN, "nsid", r.ns.id, "cdw10", r.sqe.CDW10)
	} else {
		s.log.Debug("reservation command refused", "op", r.op, "host", s.ctrl.hostNQN, "nsid", r.ns.id, "cdw10", r.sqe.CDW10, "status", st.String())
	}
	return status(st)
}

// execResvReport runs Reservation Report: NUMD (CDW10) is the zero-based
// number of dwords to return, EDS (CDW11 bit 0) asks for the extended
// structure. A buffer too small for every registrant gets the entries that
// fit; REGCTL still counts them all.
func execResvReport(_ context.Context, s *session, r *request) completion {
	sqe := &r.sqe
	if sqe.CDW11&nvme.ReportEDS == 0 {
		return status(nvme.StatusHostIDInconsistent | nvme.DNR)
	}
	n, bad := s.transferLen(r, (uint64(sqe.CDW10)+1)*4)
	if bad != 0 {
		return status(bad)
	}
	st := r.ns.resv.status(true)
	out := r.resultBuf(n)
	clear(out[copy(out, st.Marshal()):])
	return completion{data: out}
}

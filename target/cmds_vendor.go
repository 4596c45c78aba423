package target

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// nearstore's vendor commands (docs/PROTOCOL.md), entered in the admin and
// I/O tables: Function Load, Unload and List; Extent Map Put and Query;
// Grant Put and Release; Pushdown Read, λ Read and λ Write. The admin ones
// run off the reader: loading compiles, and a Grant Put or Release waits
// for the commands admitted under the grant it replaces or ends.

// checkNotDiscovery refuses a vendor command on the discovery controller
// before any data moves.
func checkNotDiscovery(s *session, _ *request) (int, nvme.Status) {
	if s.discovery {
		return 0, nvme.StatusInvalidOpcode | nvme.DNR
	}
	return 0, 0
}

// checkFunctionLoad: CDW11 is the module's size, within the server's
// MaxFunctionSize, and CDW12 bits 7:0 the length N of the program name
// that follows the module in the data (0: none; bits 31:8 reserved, 0);
// the SGL must describe both. The data then moves as any write's does:
// asked for with an R2T, buffered as it arrives.
func checkFunctionLoad(s *session, r *request) (int, nvme.Status) {
	n, name := int64(r.sqe.CDW11), int64(r.sqe.CDW12&0xFF)
	if s.discovery || n <= 0 || n > int64(s.srv.cfg.MaxFunctionSize) || r.sqe.CDW12>>8 != 0 || n+name != int64(r.sqe.DPTR.Length) {
		return 0, nvme.StatusInvalidField | nvme.DNR
	}
	return int(n + name), 0
}

// checkFunctionUnload: the data is the function's ID.
func checkFunctionUnload(s *session, r *request) (int, nvme.Status) {
	_, st := checkNotDiscovery(s, r)
	return len(sandbox.ID{}), st
}

// checkExtentMapPut bounds an Extent Map Put's payload by the transfer
// size.
func checkExtentMapPut(s *session, r *request) (int, nvme.Status) {
	return checkPayload(s, r, pushdown.MapPutHeaderSize, s.maxXfer)
}

// checkGrantPut bounds a Grant Put's payload by the extents a grant may
// have.
func checkGrantPut(s *session, r *request) (int, nvme.Status) {
	return checkPayload(s, r, pushdown.GrantHeaderSize, pushdown.GrantHeaderSize+pushdown.ExtentSize*pushdown.MaxGrantExtents)
}

func checkPayload(s *session, r *request, lo, hi int) (int, nvme.Status) {
	if _, st := checkNotDiscovery(s, r); st != 0 {
		return 0, st
	}
	n := int(r.sqe.DPTR.Length)
	if n < lo || n > hi {
		return 0, nvme.StatusSGLDataLenInvalid | nvme.DNR
	}
	return n, 0
}

// checkLambdaWrite: a λ Write's data is its request, at least a header.
func checkLambdaWrite(s *session, r *request) (int, nvme.Status) {
	n := int(r.sqe.DPTR.Length)
	if n < 64 || n > s.maxXfer {
		return 0, nvme.StatusSGLDataLenInvalid | nvme.DNR
	}
	return n, 0
}

// functionLoad loads a module, or the named program of one (an eBPF
// object's; checkFunctionLoad): CDW10 bits 7:0 declare its kind (0:
// detect). The function's ID is sandbox.ProgramID(module, program). DW0 is the number of functions the host has loaded. A load past
// the host's function quota fails with Metadata Limit.
func functionLoad(ctx context.Context, s *session, r *request) completion {
	module, program := r.data[:r.sqe.CDW11], string(r.data[r.sqe.CDW11:])
	id := sandbox.ProgramID(module, program)
	n, err := s.srv.funcs.load(ctx, s.ctrl.hostNQN, sandbox.Kind(uint8(r.sqe.CDW10)), module, program)
	if err != nil {
		// Whatever the runtime objects to (a malformed module, one that
		// fails verification, or needs more memory than the limit), the
		// module is refused; past the host's quota, Metadata Limit. Why
		// goes to the controller's Function Load Refusals log, for the
		// host to read.
		st := nvme.StatusFunctionRejected
		if errors.Is(err, errFunctionQuota) {
			st = nvme.StatusMetadataLimit
		}
		s.log.Info("function load refused", "host", s.ctrl.hostNQN, "err", err)
		s.ctrl.recordRefusal(id, st, refusalReason(err))
		return completion{status: st | nvme.DNR, refused: true}
	}
	s.log.Info("function loaded", "id", id.String(), "program", program, "bytes", len(module))
	return completion{dw0: uint32(n)}
}

// refusalReason is what the Function Load Refusals log says of err: its
// message without the sentinel's prefix every refused module's has, cut
// to fit an entry.
func refusalReason(err error) string {
	return nvme.CutReason(strings.TrimPrefix(err.Error(), sandbox.ErrBadModule.Error()+": "))
}

// functionUnload unloads the function the data names, if the host loaded
// it (another host's is not found); requests running it finish first. DW0
// is the number of functions the host has left.
func functionUnload(ctx context.Context, s *session, r *request) completion {
	var id sandbox.ID
	copy(id[:], r.data)
	ft := s.srv.funcs
	if !ft.unload(context.WithoutCancel(ctx), s.ctrl.hostNQN, id) {
		return status(nvme.StatusFunctionNotFound | nvme.DNR)
	}
	return completion{dw0: uint32(ft.count(s.ctrl.hostNQN))}
}

// functionList lists the functions the host loaded, at most CDW10 of them.
func functionList(_ context.Context, s *session, r *request) completion {
	return dataCompletion(r, s.srv.funcs.list(s.ctrl.hostNQN, int(r.sqe.CDW10)))
}

// vendorNamespace finds the namespace an admin vendor command names.
func (s *session) vendorNamespace(r *request) bool {
	r.ns = s.ss.namespace(r.sqe.NSID)
	return r.ns != nil
}

// badMap completes a command whose payload breaks the rules with Bad
// Extent Map, DW0 naming the entry at fault.
func (s *session) badMap(r *request, err error) completion {
	dw0 := uint32(noEntry)
	var ee *pushdown.EntryError
	if errors.As(err, &ee) && ee.Index >= 0 {
		dw0 = uint32(ee.Index)
	}
	s.log.Info("extent map or grant refused", "op", r.op, "host", s.ctrl.hostNQN, "err", err)
	return completion{status: nvme.StatusBadExtentMap | nvme.DNR, dw0: dw0}
}

// extentMapPut runs Extent Map Put: the whole batch is checked before any
// of it is applied. Completion DW0 is the number of updates applied, DW1
// the number ignored as not newer than what the target holds.
func extentMapPut(_ context.Context, s *session, r *request) completion {
	if !s.vendorNamespace(r) {
		return status(nvme.StatusInvalidNamespace | nvme.DNR)
	}
	ns := r.ns
	ups, err := pushdown.UnmarshalMapUpdates(r.data)
	if err != nil {
		return s.badMap(r, err)
	}
	for i := range ups {
		if ups[i].Remove {
			continue
		}
		if err := pushdown.CheckMap(&ups[i].File, ns.blocks, ns.blockSize); err != nil {
			return s.badMap(r, &pushdown.EntryError{Index: i, Err: err})
		}
	}
	m := s.srv.meta(s.ss, ns, true)
	t := m.table(s.ctrl.hostNQN, true)
	cfg := &s.srv.cfg
	d, err := t.apply(ups, cfg.MaxExtentMaps, cfg.MaxExtentMapExtents)
	if err != nil {
		s.log.Warn("extent map put refused", "host", s.ctrl.hostNQN, "nsid", ns.id, "err", err)
		return status(nvme.StatusMetadataLimit | nvme.DNR)
	}
	s.srv.metrics.mapsChanged(m.ssNQN, ns.id, d)
	return completion{dw0: uint32(d.applied), dw1: uint32(d.ignored)}
}

// extentMapQuery runs Extent Map Query: for each inode of the request,
// what the target holds of the host's maps. The inodes travel in the
// capsule, as the bidirectional I/O commands' requests do. The result is a
// 16-byte header — count (4), reserved (12) — then one 16-byte entry per
// inode, in order: version (8; 0 if none), flags (4; bit 0: removed, the
// version being the removal's), number of extents (4).
func extentMapQuery(_ context.Context, s *session, r *request) completion {
	if !s.vendorNamespace(r) {
		return status(nvme.StatusInvalidNamespace | nvme.DNR)
	}
	n := len(r.data) / 8
	if len(r.data)%8 != 0 || n == 0 || n > maxQueryInodes {
		return s.badMap(r, fmt.Errorf("%w: query of %d bytes (want 1 to %d inodes of 8 bytes)", pushdown.ErrMalformed, len(r.data), maxQueryInodes))
	}
	size := queryResultHeader + queryEntrySize*n
	if r.inCap < size {
		return status(nvme.StatusSGLDataLenInvalid | nvme.DNR)
	}
	out := make([]byte, size)
	binary.LittleEndian.PutUint32(out, uint32(n))
	var t *mapTable
	if m := s.srv.meta(s.ss, r.ns, false); m != nil {
		t = m.table(s.ctrl.hostNQN, false)
	}
	if t != nil {
		t.mu.RLock()
		for i := range n {
			v, removed, nx := t.version(binary.LittleEndian.Uint64(r.data[8*i:]))
			e := out[queryResultHeader+queryEntrySize*i:]
			binary.LittleEndian.PutUint64(e, v)
			if removed {
				binary.LittleEndian.PutUint32(e[8:], 1)
			}
			binary.LittleEndian.PutUint32(e[12:], uint32(nx))
		}
		t.mu.RUnlock()
	}
	return completion{dw0: uint32(n), data: out}
}

// grantPut runs Grant Put.
func grantPut(_ context.Context, s *session, r *request) completion {
	if !s.vendorNamespace(r) {
		return status(nvme.StatusInvalidNamespace | nvme.DNR)
	}
	ns := r.ns
	var g pushdown.Grant
	if err := g.Unmarshal(r.data); err != nil {
		return s.badMap(r, err)
	}
	for j, x := range g.Extents {
		if x.LBA > ns.blocks || uint64(x.Blocks) > ns.blocks-x.LBA {
			return s.badMap(r, &pushdown.EntryError{Index: j, Err: fmt.Errorf("%w: extent at LBA %d (+%d) of %d blocks", pushdown.ErrBadExtent, x.LBA, x.Blocks, ns.blocks)})
		}
	}
	host := s.ctrl.hostNQN
	if g.Host == host {
		return s.badMap(r, fmt.Errorf("%w: a host cannot grant to itself", pushdown.ErrMalformed))
	}
	srv := s.srv
	if !ns.resv.holds(host) {
		s.log.Info("grant refused: the host does not hold the namespace's reservation", "host", host, "nsid", ns.id, "grantee", g.Host)
		srv.metrics.accessDenied(s.ss.nqn, ns.id)
		return status(nvme.StatusAccessDenied | nvme.DNR)
	}
	m := srv.meta(s.ss, ns, true)
	old, n, err := m.grants.put(host, &g, srv.cfg.Now(), srv.cfg.MaxGrants)
	switch {
	case errors.Is(err, errGrantDenied):
		s.log.Info("grant refused", "host", host, "nsid", ns.id, "err", err)
		srv.metrics.accessDenied(s.ss.nqn, ns.id)
		return status(nvme.StatusAccessDenied | nvme.DNR)
	case err != nil:
		s.log.Warn("grant refused", "host", host, "nsid", ns.id, "err", err)
		return status(nvme.StatusMetadataLimit | nvme.DNR)
	}
	srv.metrics.grantsHeld(s.ss.nqn, ns.id, n)
	if old != nil {
		old.drain()
	}
	s.log.Info("grant", "owner", host, "id", g.ID, "grantee", g.Host, "nsid", ns.id,
		"mode", g.Mode.String(), "lease", g.Lease, "extents", len(g.Extents))
	return completion{}
}

// grantRelease runs Grant Release: CDW10 and CDW11 hold the ID, low dword
// first. It completes once nothing admitted under the grant is running;
// DW0 is 1 if the grant was held, 0 if there was none (already released,
// or expired and forgotten), which is not an error so that releases can be
// resent. With grantReleaseAll in CDW12 it releases every grant the
// sending host holds on the namespace, and DW0 counts them.
func grantRelease(_ context.Context, s *session, r *request) completion {
	if !s.vendorNamespace(r) {
		return status(nvme.StatusInvalidNamespace | nvme.DNR)
	}
	ns, host, srv := r.ns, s.ctrl.hostNQN, s.srv
	m := srv.meta(s.ss, ns, false)
	if m == nil {
		return completion{}
	}
	if r.sqe.CDW12&grantReleaseAll != 0 {
		gs, n := m.grants.releaseAll(host, srv.cfg.Now())
		srv.metrics.grantsHeld(s.ss.nqn, ns.id, n)
		for _, g := range gs {
			g.drain()
		}
		if len(gs) > 0 {
			s.log.Info("grants released", "owner", host, "count", len(gs), "nsid", ns.id)
		}
		return completion{dw0: uint32(len(gs))}
	}
	id := uint64(r.sqe.CDW10) | uint64(r.sqe.CDW11)<<32
	g, n := m.grants.release(host, id, srv.cfg.Now())
	srv.metrics.grantsHeld(s.ss.nqn, ns.id, n)
	if g == nil {
		return completion{}
	}
	g.drain()
	s.log.Info("grant released", "owner", host, "id", id, "nsid", ns.id)
	return completion{dw0: 1}
}

// execFunction runs Pushdown Read, λ Read and λ Write under ctx, which
// ends the function's run when the queue goes away.
func execFunction(ctx context.Context, s *session, r *request) completion {
	// The decoded request and the module wrapper live in r (r.fn), not
	// one allocation each per command.
	req := &r.fn.req
	if err := req.Unmarshal(r.data); err != nil {
		return status(nvme.StatusBadFunctionRequest | nvme.DNR)
	}
	funcs := s.srv.funcs
	f := funcs.acquire(req.Function)
	if f == nil {
		return status(nvme.StatusFunctionNotFound | nvme.DNR)
	}
	defer funcs.release(ctx, f)
	// Files named by inode run on the maps this host put, at exactly the
	// versions the request names; the request keeps those maps however
	// many Puts arrive while it runs.
	files, err := s.resolveFiles(r, req.Files)
	if err != nil {
		s.log.Debug("function request refused", "op", r.op, "err", err)
		return status(functionStatus(err, false))
	}
	req.Files = files
	refs, st := s.admitFunction(r, req)
	if st != 0 {
		return status(st)
	}
	defer refs.release()
	// At most MaxFunctionCallsPerHost of the host's requests run at once.
	hc, err := s.srv.calls.acquire(ctx, s.ctrl.calls)
	if err != nil {
		return status(nvme.StatusAbortSQDeleted)
	}
	defer s.srv.calls.release(hc)
	// The function's instance is the host's own: no other host's request
	// ever ran in its memory (sandbox.WithTenant).
	ctx = s.tenantContext(ctx)
	f.calls.Add(1)
	dev := r.ns.dev
	exec := s.srv.exec
	var res pushdown.Result
	// A pushdown's output goes straight into the response buffer, after
	// the result's header.
	var out []byte
	// The target time runs from the first read to the result: what a
	// host's dispatcher subtracts from the round trip to see the transfer.
	began := time.Now()
	// Its code runs on the host's share of the function CPU slots.
	mod := &r.fn.mod
	*mod = scheduledModule{Module: f.mod, s: s.srv.sched, host: s.ctrl.hostNQN}
	switch r.sqe.Opcode {
	case nvme.IOPushdownRead:
		// On a warm worker already (conn.dispatch): its stack has the
		// depth of the wasm call and the reads inside it. The output is
		// at most the scratch, whatever result buffer the host offers.
		var into []byte
		if r.inCap >= pushdown.ResultSize {
			out = r.resultBuf(min(r.inCap, pushdown.ResultSize+sandbox.ScratchSize))
			into = out[pushdown.ResultSize:pushdown.ResultSize]
		}
		res, err = exec.PushdownInto(ctx, dev, mod, req, into)
		res.TargetMicros = pushdown.MicrosOf(time.Since(began))
	case nvme.IOLambdaRead:
		res, err = exec.LambdaRead(ctx, dev, mod, req, r.inCap-pushdown.ResultSize)
		res.TargetMicros = pushdown.MicrosOf(time.Since(began))
	case nvme.IOLambdaWrite:
		var n int64
		res, n, err = exec.LambdaWrite(ctx, dev, mod, req)
		if err == nil {
			// The output went to whole blocks, padded with zeroes.
			bs := int64(r.ns.backend.BlockSize())
			s.countIO(false, (n+bs-1)/bs*bs)
			return completion{dw0: uint32(n)}
		}
	}
	s.ctrl.smart.readCmds.Add(uint64(res.Reads))
	s.ctrl.smart.readBlocks512.Add(res.BytesRead >> 9)
	if err != nil {
		st := functionStatus(err, r.sqe.Opcode == nvme.IOLambdaWrite)
		dw1 := uint32(res.BytesRead)
		if st.Code() == nvme.StatusFunctionError {
			dw1 = uint32(res.Code)
		}
		s.log.Debug("function request failed", "op", r.op, "err", err)
		return completion{status: st, dw0: res.Reads, dw1: dw1}
	}
	if pushdown.ResultSize+len(res.Output) > r.inCap {
		return completion{status: nvme.StatusFunctionOutput | nvme.DNR, dw0: res.Reads, dw1: uint32(res.BytesRead)}
	}
	if out == nil {
		out = r.resultBuf(pushdown.ResultSize + len(res.Output))
	}
	n := res.Marshal(out)
	return completion{dw0: res.Reads, dw1: uint32(res.BytesRead), data: out[:n]}
}

// backendDevice gives the executor a namespace's backend.
type backendDevice struct{ Backend }

package target

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/auth"
	"github.com/nearstore/nearstore/sandbox"
)

// The controller layer: it executes a command, session.exec(ctx, r) →
// completion, and knows nothing of PDUs. Commands are found in one table
// per command set (fabrics, admin, NVM I/O with nearstore's vendor
// opcodes; cmds_*.go), and every rule that holds for a whole set is applied
// here, once, rather than by each handler:
//
//   - before Connect, only Connect runs (Command Sequence Error);
//   - on a queue that must authenticate, only Authentication Send and
//     Receive run until it has (Authentication Required; auth.go);
//   - admin commands need CSTS.RDY, and the discovery controller runs only
//     the few its table entries allow;
//   - NVM commands are checked against their namespace's reservation and,
//     for a task host, its grants, by the access class of their entry.
//
// Adding a command is one table entry and one handler.

// dataDir is the data a command moves, as its table entry declares it.
type dataDir uint8

// dirIn is data from the host, as many bytes as the entry's check says,
// in the capsule or asked for with an R2T; dirOut is data to the host, the
// completion's; dirBoth is nearstore's bidirectional commands, whose
// request is the whole in-capsule data and whose SGL describes the result
// buffer.
const (
	dirNone dataDir = iota
	dirIn
	dirOut
	dirBoth
)

// resvGroup is the reservation command group an NVM command belongs to
// (reservations.go): reads and writes are allowed by different types.
type resvGroup uint8

const (
	resvNone resvGroup = iota // not affected by reservations
	resvRead
	resvWrite
)

// grantScope says which blocks a task host needs grants for (grants.go).
type grantScope uint8

const (
	grantNone  grantScope = iota // no blocks, or none checked here
	grantLBAs                    // SLBA and NLB: read, or write for the write group
	grantDSM                     // the ranges a deallocating Dataset Management names
	grantFiles                   // a function request's files, checked by its handler once resolved
)

// access is a command's access class: the checks the controller layer
// makes before its handler runs.
type access struct {
	resv  resvGroup
	grant grantScope
}

// handler executes one command. It runs on the connection's reader or on
// a goroutine of its own (cmdSpec.blocking), with a context that ends when
// the queue fails or closes, or the server's shutdown grace period ends.
type handler func(ctx context.Context, s *session, r *request) completion

// cmdSpec is one command's table entry.
type cmdSpec struct {
	// label is the op label of the command's metrics; "" counts it as
	// "admin", "fabrics" or "other" (metrics.go).
	label  string
	dir    dataDir
	access access
	// check, if set, checks the command before any of its data is asked
	// for and returns the bytes of host data it needs (dirIn): a write
	// past the end of its namespace fails before an R2T asks for data
	// that would be thrown away.
	check func(s *session, r *request) (want int, st nvme.Status)
	// blocking commands may wait (for a device, a compile, a grant's
	// drain) and run on a goroutine of their own, so the reader never
	// waits on them.
	blocking bool
	// fast: a read or write, which the reader runs itself when its
	// backend is in memory and the transfer small (runsInline).
	fast bool
	// discovery: the discovery controller implements it.
	discovery bool
	// changesData: the command may change the namespace's user data
	// (blocks, or a KV namespace's values); the Commands Supported and
	// Effects log reports it as LBCC (iocs.go).
	changesData bool
	// allNamespaces: NSID FFFFFFFFh names every namespace.
	allNamespaces bool
	exec          handler
}

// cmdTable is one command set's table, indexed by opcode (by command type
// for Fabrics): a lookup on every command is one index.
type cmdTable [256]*cmdSpec

func tableOf(entries map[uint8]*cmdSpec) *cmdTable {
	var t cmdTable
	for op, spec := range entries {
		t[op] = spec
	}
	return &t
}

// commandSets are the tables, built once per server.
type commandSets struct {
	fabrics, admin, io, kv *cmdTable
}

func newCommandSets() commandSets {
	return commandSets{fabrics: tableOf(fabricsCommands()), admin: tableOf(adminCommands()), io: tableOf(ioCommands()), kv: tableOf(kvCommands())}
}

// qpair is what the controller layer needs of the connection a queue runs
// on: to close it (a controller going away takes its queues with it), and
// to complete a command a handler parked.
type qpair interface {
	close()
	completeParked(cid uint16, c completion)
}

// session is one queue as the controller layer sees it. Connect binds it to
// a controller, on the connection's reader, before any other command of the
// queue is looked at; it does not change afterwards.
type session struct {
	srv   *Server
	qp    qpair
	log   *slog.Logger
	local net.Addr // the address the host reached us on (discovery log)

	ctrl      *controller
	ss        *subsystem
	qid       uint16
	discovery bool
	maxXfer   int
	// What Connect asked of the transport: the queue's depth, and SQ flow
	// control disabled (CATTR bit 2).
	depth    int
	noSQFlow bool
	// auth is the queue's DH-HMAC-CHAP authentication, set by Connect for
	// a host with secrets (auth.go); until it succeeds, only the commands
	// that carry it run. authRefused: a host without secrets tried to
	// authenticate.
	auth        *auth.Controller
	authRefused bool
	// authOK mirrors auth.Authenticated() for commands running off the
	// reader: only the reader runs the transaction (its commands are not
	// blocking), so it alone writes auth and authOK.
	authOK atomic.Bool
	// tenantCtx is tenantBase (the queue's context) with the host as
	// sandbox tenant, made once when Connect binds the queue (conn.bound),
	// before any function command runs, and only read after: function
	// commands need not make it each (tenantContext).
	tenantBase, tenantCtx context.Context
	// lastSeries is the metrics series the queue's last completion
	// updated: most of a queue's commands are of one kind, so record
	// seldom looks further (Metrics.observe).
	lastSeries atomic.Pointer[cmdSeries]
}

// tenantContext returns ctx with the controller's host as sandbox tenant.
func (s *session) tenantContext(ctx context.Context) context.Context {
	if s.tenantCtx != nil && ctx == s.tenantBase {
		return s.tenantCtx
	}
	return sandbox.WithTenant(ctx, s.ctrl.hostNQN)
}

// touch counts a command that arrived at at as keep-alive traffic. Commands of a queue that
// has yet to authenticate do not count: an association that never
// authenticates ends when its keep-alive timeout (or MaxIdle) runs out,
// whatever it sends.
func (s *session) touch(at time.Time) {
	if s.ctrl != nil && (s.auth == nil || s.authOK.Load()) {
		s.ctrl.touch(at)
	}
}

// prepare finds r's table entry and checks r before any of its data is
// accepted, setting r.want to the bytes of host data it needs. A failure
// is the status r completes with, unexecuted.
func (s *session) prepare(r *request) nvme.Status {
	sqe := &r.sqe
	cs := &s.srv.cmds
	switch {
	case sqe.Opcode == nvme.AdminFabrics:
		r.spec = cs.fabrics[sqe.FabricsType()]
	case s.ctrl == nil:
		return 0 // exec answers Command Sequence Error
	case s.qid == 0:
		r.spec = cs.admin[sqe.Opcode]
		if r.spec == nil && nvme.DataDirection(sqe.Opcode)&nvme.DirHostToCtrl != 0 {
			// No other admin command takes data from the host; refuse
			// before an R2T asks for it.
			return nvme.StatusInvalidOpcode | nvme.DNR
		}
	default:
		spec := cs.io[sqe.Opcode]
		if spec == nil || !spec.allNamespaces || sqe.NSID != 0xFFFFFFFF {
			if r.ns = s.ss.namespace(sqe.NSID); r.ns == nil {
				return nvme.StatusInvalidNamespace | nvme.DNR
			}
		}
		if r.ns != nil && r.ns.kv != nil {
			// A KV namespace's command set, if CC.CSS enabled it;
			// otherwise it has no I/O command (iocs.go).
			spec = nil
			if s.ctrl.kvEnabled.Load() {
				spec = cs.kv[sqe.Opcode]
			}
		}
		if spec == nil {
			return nvme.StatusInvalidOpcode | nvme.DNR
		}
		r.spec = spec
	}
	if r.spec == nil {
		return 0
	}
	// Labelled as soon as the command is known, so one refused by a rule
	// (a reservation conflict, a grant, a bad field) counts under its own
	// op, not "other".
	r.op = r.spec.label
	if r.spec.check != nil {
		want, st := r.spec.check(s, r)
		if st != 0 {
			return st
		}
		if want > 0 && r.spec.dir != dirIn {
			panic(fmt.Sprintf("target: opcode %#x asks for host data but its table entry says direction %d", sqe.Opcode, r.spec.dir))
		}
		r.want = want
	}
	// No command returns more than MDTS allows: a longer SGL is refused
	// before a handler could size anything by it.
	if (r.spec.dir == dirOut || r.spec.dir == dirBoth) && int64(sqe.DPTR.Length) > int64(s.maxXfer) {
		return nvme.StatusSGLDataLenInvalid | nvme.DNR
	}
	// Data from the host is described by an SGL, the only kind the
	// target offers.
	if (r.want > 0 || r.spec.dir == dirBoth) && sqe.Flags&0xC0 != nvme.PSDTSGL {
		return nvme.StatusInvalidField | nvme.DNR
	}
	return 0
}

// exec executes a command that prepare passed and whose data is in hand,
// and returns its completion.
func (s *session) exec(ctx context.Context, r *request) completion {
	sqe := &r.sqe
	fabrics := sqe.Opcode == nvme.AdminFabrics
	if s.ctrl == nil && !(fabrics && sqe.FabricsType() == nvme.FabricsConnect) {
		return status(nvme.StatusCommandSequence | nvme.DNR)
	}
	if st := s.authAllowed(r); st != 0 {
		return status(st)
	}
	var refs grantRefs
	switch {
	case fabrics:
	case s.qid == 0:
		if st := s.adminAllowed(r); st != 0 {
			return status(st)
		}
	default:
		if st := s.reservationConflict(r); st != 0 {
			return status(st)
		}
		var st nvme.Status
		if refs, st = s.admitIO(r); st != 0 {
			return status(st)
		}
	}
	defer refs.release()
	if r.spec == nil {
		return status(nvme.StatusInvalidOpcode | nvme.DNR)
	}
	r.op = r.spec.label
	return r.spec.exec(ctx, s, r)
}

// adminAllowed applies the rules every admin command is under.
func (s *session) adminAllowed(r *request) nvme.Status {
	if s.discovery && nvme.IsVendorAdmin(r.sqe.Opcode) {
		return nvme.StatusInvalidOpcode | nvme.DNR
	}
	if !s.ctrl.ready() {
		return nvme.StatusCommandSequence | nvme.DNR
	}
	if s.discovery && (r.spec == nil || !r.spec.discovery) {
		return nvme.StatusInvalidOpcode | nvme.DNR
	}
	return 0
}

// record notes a completion about to be sent: failures in the controller's
// Error Information log, every command in the metrics. A host that has seen
// the completion and then looks must find it.
func (s *session) record(r *request, c completion) {
	if !c.status.OK() && s.ctrl != nil {
		var lba uint64
		if r.ns != nil {
			lba = r.sqe.SLBA()
		}
		var vendorLog uint8
		if s.qid == 0 && r.sqe.Opcode == nvme.AdminFunctionLoad && c.refused {
			vendorLog = nvme.LogFunctionRefusals
		}
		s.ctrl.recordError(s.qid, r.sqe.CID, c.status, r.sqe.NSID, lba, vendorLog)
	}
	if s.ss != nil {
		s.srv.metrics.observe(&s.lastSeries, s.ss.nqn, s.qid == 0, r, c.status, len(c.data))
	}
}

// transferLen checks the length n a data-returning command asks for in its
// own fields (NUMD and the like) against its SGL and MDTS, as Linux nvmet's
// nvmet_check_transfer_len: the two lengths must agree, and neither may
// pass the transfer size. Only then may the handler allocate n bytes, so
// no command makes the target allocate more than min(asked, SGL, MDTS).
func (s *session) transferLen(r *request, n uint64) (int, nvme.Status) {
	sgl := r.sqe.DPTR
	switch {
	case sgl.Type != nvme.SGLTransportDataBlock:
		return 0, nvme.StatusSGLTypeInvalid | nvme.DNR
	case n > uint64(s.maxXfer):
		return 0, nvme.StatusInvalidField | nvme.DNR
	case uint64(sgl.Length) != n:
		return 0, nvme.StatusSGLDataLenInvalid | nvme.DNR
	}
	return int(n), 0
}

// dataCompletion completes a command with data for the host, as much as
// its SGL takes.
func dataCompletion(r *request, data []byte) completion {
	sgl := r.sqe.DPTR
	if sgl.Type != nvme.SGLTransportDataBlock {
		return status(nvme.StatusSGLTypeInvalid | nvme.DNR)
	}
	if int(sgl.Length) < len(data) {
		data = data[:sgl.Length]
	}
	return completion{data: data}
}

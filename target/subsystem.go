package target

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/auth"
	"github.com/nearstore/nearstore/pushdown"
)

// namespace is one exported volume.
type namespace struct {
	id        uint32
	backend   Backend
	name      string
	blockSize int
	lbaShift  uint8
	blocks    uint64
	nguid     [16]byte
	uuid      [16]byte
	resv      reservations // reservations.go
	kv        KVStore      // a KV namespace's store (cmds_kv.go); nil for NVM
	// dev is backend as the function executor's device, made once so
	// that a function request does not box it.
	dev pushdown.Device
}

// subsystem is an NVM subsystem: namespaces plus the controllers hosts have
// created on it.
type subsystem struct {
	srv    *Server
	nqn    string
	model  string
	serial string

	// allowed and allowAny say which hosts may connect (admits); they do
	// not change after New.
	allowed  map[string]struct{}
	allowAny bool
	// keys are the DH-HMAC-CHAP secrets by host NQN, authHashes and
	// authGroups what the controller accepts (auth.go); set by New,
	// never changed.
	keys       map[string]hostKeys
	authHashes []auth.Hash
	authGroups []auth.DHGroup

	mu          sync.RWMutex
	namespaces  map[uint32]*namespace
	controllers map[uint16]*controller
	nextCNTLID  uint16
}

func newSubsystem(s *Server, sc SubsystemConfig) *subsystem {
	id := stableID("serial", sc.NQN)
	model := sc.Model
	if model == "" {
		model = "nearstore"
	}
	allowed := make(map[string]struct{}, len(sc.AllowedHosts))
	for _, h := range sc.AllowedHosts {
		allowed[h] = struct{}{}
	}
	return &subsystem{
		srv:         s,
		allowed:     allowed,
		allowAny:    sc.AllowAnyHost,
		nqn:         sc.NQN,
		model:       model,
		serial:      hex.EncodeToString(id[:10]),
		namespaces:  make(map[uint32]*namespace),
		controllers: make(map[uint16]*controller),
		nextCNTLID:  1,
	}
}

// admits reports whether host may connect to the subsystem. A subsystem
// that names no allowed host admits any: Serve lets it listen on loopback
// addresses only.
func (ss *subsystem) admits(host string) bool {
	if ss.allowAny || len(ss.allowed) == 0 {
		return true
	}
	_, ok := ss.allowed[host]
	return ok
}

func (ss *subsystem) addNamespace(nc NamespaceConfig) (uint32, error) {
	if nc.Backend == nil {
		return 0, fmt.Errorf("target: %s: namespace without a backend", ss.nqn)
	}
	bs := nc.Backend.BlockSize()
	shift := uint8(0)
	for 1<<shift < bs {
		shift++
	}
	if bs < 512 || bs > 65536 || 1<<shift != bs {
		return 0, fmt.Errorf("target: %s: block size %d is not a power of two in [512, 65536]", ss.nqn, bs)
	}
	if nc.Backend.Size() < int64(bs) {
		return 0, fmt.Errorf("target: %s: volume of %d bytes is smaller than a block", ss.nqn, nc.Backend.Size())
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	id := nc.ID
	if id == 0 {
		id = 1
		for ss.namespaces[id] != nil {
			id++
		}
	}
	if id == 0xFFFFFFFF {
		return 0, fmt.Errorf("target: %s: NSID %#x is reserved", ss.nqn, id)
	}
	if ss.namespaces[id] != nil {
		return 0, fmt.Errorf("target: %s: NSID %d configured twice", ss.nqn, id)
	}
	idstr := fmt.Sprint(id)
	idname := nc.Name
	if in, ok := nc.Backend.(instanced); ok {
		idname += "\x00" + in.Instance()
	}
	ss.namespaces[id] = &namespace{
		id:        id,
		backend:   nc.Backend,
		name:      nc.Name,
		blockSize: bs,
		lbaShift:  shift,
		blocks:    uint64(nc.Backend.Size()) >> shift,
		nguid:     stableID("nguid", ss.nqn, idstr, idname),
		uuid:      stableID("uuid", ss.nqn, idstr, idname),
		kv:        nc.KV,
		dev:       backendDevice{nc.Backend},
	}
	return id, nil
}

func (ss *subsystem) namespace(id uint32) *namespace {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	return ss.namespaces[id]
}

// nsids returns the active NSIDs in ascending order.
func (ss *subsystem) nsids() []uint32 {
	ss.mu.RLock()
	ids := make([]uint32, 0, len(ss.namespaces))
	for id := range ss.namespaces {
		ids = append(ids, id)
	}
	ss.mu.RUnlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (ss *subsystem) flushAll() error {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	var errs []error
	for _, ns := range ss.namespaces {
		if err := ns.backend.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("target: flush nsid %d: %w", ns.id, err))
		}
	}
	return errors.Join(errs...)
}

// newController creates a controller for a host's admin queue.
func (ss *subsystem) newController(hostNQN string, hostID [16]byte, kato time.Duration, discovery bool) (*controller, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.controllers) >= 0xFFEF {
		return nil, errors.New("target: no controller IDs left")
	}
	for ss.controllers[ss.nextCNTLID] != nil || ss.nextCNTLID == 0 || ss.nextCNTLID >= 0xFFF0 {
		ss.nextCNTLID++
		if ss.nextCNTLID >= 0xFFF0 {
			ss.nextCNTLID = 1
		}
	}
	c := &controller{
		ss:          ss,
		id:          ss.nextCNTLID,
		hostNQN:     hostNQN,
		hostID:      hostID,
		discovery:   discovery,
		kato:        kato,
		ioQueues:    ss.srv.cfg.MaxIOQueues,
		queues:      make(map[uint16]qpair),
		vwc:         true,
		aenEnabled:  aenNamespaceAttr,
		created:     time.Now(),
		changedNS:   make(map[uint32]struct{}),
		aenMaskedNS: false,
		calls:       ss.srv.calls.join(hostNQN),
	}
	ss.nextCNTLID++
	ss.controllers[c.id] = c
	if !discovery {
		ss.srv.hostUp(hostNQN)
	}
	return c, nil
}

func (ss *subsystem) controller(id uint16) *controller {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	return ss.controllers[id]
}

func (ss *subsystem) removeController(c *controller) {
	ss.mu.Lock()
	removed := ss.controllers[c.id] == c
	if removed {
		delete(ss.controllers, c.id)
	}
	ss.mu.Unlock()
	if !removed {
		return
	}
	// Its requests still running keep the entry until they finish.
	ss.srv.calls.leave(c.calls)
	if !c.discovery {
		ss.srv.hostDown(c.hostNQN)
	}
}

// namespaceChanged records a namespace change on every controller and
// completes a waiting Asynchronous Event Request where one is enabled.
func (ss *subsystem) namespaceChanged(nsid uint32) {
	ss.mu.RLock()
	cs := make([]*controller, 0, len(ss.controllers))
	for _, c := range ss.controllers {
		cs = append(cs, c)
	}
	ss.mu.RUnlock()
	for _, c := range cs {
		c.noteNamespaceChanged(nsid)
	}
}

// Asynchronous event bits (Set Features 0Bh) and the event nearstore raises.
const (
	aenNamespaceAttr = 1 << 8
	// aenNotice is AEN type 2h (notice), info 00h (namespace attribute
	// changed), log page 04h, packed as completion DW0.
	aenNoticeNSChanged = 0x2 | 0x00<<8 | nvme.LogChangedNS<<16
	maxAER             = 4
	errorLogEntries    = 64
)

// controller is one host's association with a subsystem: the admin queue
// plus its I/O queues.
type controller struct {
	ss        *subsystem
	id        uint16
	hostNQN   string
	hostID    [16]byte
	discovery bool
	created   time.Time
	// calls is the host's entry in the server's call limiter, held from
	// newController to removeController, so that a function request
	// takes its slot without looking the host up (callLimiter).
	calls *hostCalls

	// kvEnabled: CC.CSS enabled the KV command set (iocs.go); read by
	// every I/O command of a KV namespace, so not under mu.
	kvEnabled atomic.Bool

	// lastTraffic is the newest keep-alive traffic, as time since
	// created: every counted command raises it with one atomic operation
	// (touch) rather than resetting the timer, as Linux nvmet's
	// reset_tbkas. The timer, when it fires, rearms for lastTraffic plus
	// the timeout if that is still ahead (keepAliveFired), so the
	// controller goes exactly one timeout after its last traffic.
	lastTraffic atomic.Int64

	mu       sync.Mutex
	cc       uint32
	csts     uint32
	kato     time.Duration
	kaTimer  *time.Timer // nil until startKeepAlive; then the one timer, rearmed
	ioQueues int         // granted by Set Features Number of Queues
	queues   map[uint16]qpair
	vwc      bool
	dead     bool
	// authWait holds the queues that must authenticate and have not yet;
	// while any does, the keep-alive timeout is at least MaxIdle (auth.go).
	authWait map[uint16]struct{}

	aenEnabled  uint32
	aers        []pendingAER
	aenPending  bool // an event the host has not yet been told of
	aenMaskedNS bool // a namespace notice was sent and the log not yet read
	changedNS   map[uint32]struct{}

	errorCount uint64
	errorLog   [errorLogEntries][64]byte
	errorNext  int
	smart      smartCounters

	// refusals is the Function Load Refusals log (nvme.LogFunctionRefusals):
	// a ring of the last entries, refusalNext the slot the next goes to,
	// refusalCount the refusals ever recorded (the newest one's number).
	refusals     [nvme.RefusalEntries][nvme.RefusalEntrySize]byte
	refusalNext  int
	refusalCount uint64
}

// recordRefusal adds a refused Function Load to the controller's
// Function Load Refusals log.
func (c *controller) recordRefusal(id [32]byte, st nvme.Status, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refusalCount++
	f := nvme.FunctionRefusal{ID: id, Number: c.refusalCount, Status: st, Reason: reason}
	f.Marshal(c.refusals[c.refusalNext][:])
	c.refusalNext = (c.refusalNext + 1) % nvme.RefusalEntries
}

// refusalLog returns the Function Load Refusals page, newest first.
func (c *controller) refusalLog() []byte {
	page := make([]byte, nvme.RefusalLogSize)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range nvme.RefusalEntries {
		copy(page[i*nvme.RefusalEntrySize:], c.refusals[(c.refusalNext-1-i+2*nvme.RefusalEntries)%nvme.RefusalEntries][:])
	}
	return page
}

type pendingAER struct {
	qp  qpair
	cid uint16
}

// smartCounters feed the SMART log. They are atomics because every I/O
// goroutine of every queue bumps them.
type smartCounters struct {
	readCmds, writeCmds, readBlocks512, writeBlocks512, mediaErrors atomic.Uint64
}

// ready reports CSTS.RDY.
func (c *controller) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.csts&nvme.CSTSReady != 0
}

// attach registers an I/O or admin queue with the controller.
func (c *controller) attach(qid uint16, qp qpair) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return errors.New("controller is gone")
	}
	if c.queues[qid] != nil {
		return fmt.Errorf("queue %d already connected", qid)
	}
	c.queues[qid] = qp
	return nil
}

// detach removes a queue; losing the admin queue ends the controller, as it
// does in the Linux target: its I/O queues are closed and its ID freed.
func (c *controller) detach(qid uint16, qp qpair) {
	c.mu.Lock()
	if c.queues[qid] == qp {
		delete(c.queues, qid)
		delete(c.authWait, qid)
	}
	var rest []qpair
	if qid == 0 {
		rest = c.teardownLocked()
	}
	c.mu.Unlock()
	for _, o := range rest {
		o.close()
	}
	if qid == 0 {
		c.ss.removeController(c)
	}
}

func (c *controller) teardownLocked() []qpair {
	c.dead = true
	if c.kaTimer != nil {
		c.kaTimer.Stop()
	}
	c.aers = nil
	rest := make([]qpair, 0, len(c.queues))
	for _, o := range c.queues {
		rest = append(rest, o)
	}
	return rest
}

// startKeepAlive arms the keep-alive timer. Any command received counts as
// traffic (Traffic Based Keep Alive, advertised in CTRATT), so a busy host
// need not send Keep Alive commands.
//
// A host that asked for no keep-alive (KATO 0) still has one: the
// server's MaxIdle, so a controller nobody uses does not hold its
// connections and state for ever.
func (c *controller) startKeepAlive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armKeepAliveLocked()
}

// armKeepAliveLocked (re)starts the keep-alive timer for the current
// timeout, counting now as traffic: a change of timeout runs from when it
// is made.
func (c *controller) armKeepAliveLocked() {
	if c.dead {
		return
	}
	c.noteTraffic(time.Since(c.created))
	if c.kaTimer == nil {
		c.kaTimer = time.AfterFunc(c.timeoutLocked(), c.keepAliveFired)
		return
	}
	c.kaTimer.Reset(c.timeoutLocked())
}

// timeoutLocked is the keep-alive timeout in force: KATO, or MaxIdle if
// the host asked for none or its admin queue has yet to authenticate (a
// host may send nothing for seconds while it computes a large DH group's
// values; nvmet gives a transaction KATO or 120 s).
func (c *controller) timeoutLocked() time.Duration {
	if c.kato > 0 && (len(c.authWait) == 0 || c.kato >= c.ss.srv.cfg.MaxIdle) {
		return c.kato
	}
	return c.ss.srv.cfg.MaxIdle
}

// awaitAuth notes that queue qid must authenticate: until it has (or is
// gone), the keep-alive timeout is at least MaxIdle: a host may send
// nothing on any queue for seconds while it computes a queue's DH values.
func (c *controller) awaitAuth(qid uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.authWait == nil {
		c.authWait = make(map[uint16]struct{})
	}
	c.authWait[qid] = struct{}{}
	if c.kaTimer != nil {
		c.armKeepAliveLocked()
	}
}

// authenticated notes that queue qid has authenticated.
func (c *controller) authenticated(qid uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.authWait[qid]; ok {
		delete(c.authWait, qid)
		if c.kaTimer != nil {
			c.armKeepAliveLocked()
		}
	}
}

// touch counts a command that arrived at at (a time with a monotonic
// reading) as keep-alive traffic. It is on every command's path, so it
// takes no lock and leaves the timer alone (see lastTraffic).
func (c *controller) touch(at time.Time) {
	c.noteTraffic(at.Sub(c.created))
}

// noteTraffic raises lastTraffic to d. Queues run on their own
// goroutines, so a command may arrive at an earlier time than one already
// noted: lastTraffic never goes back.
func (c *controller) noteTraffic(d time.Duration) {
	for {
		old := c.lastTraffic.Load()
		if int64(d) <= old || c.lastTraffic.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// fail ends the controller at once, as Linux nvmet's fatal error: every
// queue closes and its ID is freed.
func (c *controller) fail() {
	c.mu.Lock()
	qs := c.teardownLocked()
	c.mu.Unlock()
	for _, q := range qs {
		q.close()
	}
	c.ss.removeController(c)
}

// keepAliveFired runs when the keep-alive timer fires: if traffic came
// since it was armed, the timer is rearmed for one timeout after the last
// of it; otherwise the timeout has passed without traffic and the
// controller is torn down.
func (c *controller) keepAliveFired() {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	left := time.Duration(c.lastTraffic.Load()) + c.timeoutLocked() - time.Since(c.created)
	if left > 0 {
		c.kaTimer.Reset(left)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.ss.srv.log.Warn("keep alive timeout: tearing down controller",
		"subsystem", c.ss.nqn, "cntlid", c.id, "host", c.hostNQN, "kato", c.kato, "max_idle", c.ss.srv.cfg.MaxIdle)
	c.ss.srv.metrics.error("keep_alive_timeout")
	c.fail()
}

func (c *controller) noteNamespaceChanged(nsid uint32) {
	c.mu.Lock()
	if len(c.changedNS) < 1024 {
		c.changedNS[nsid] = struct{}{}
	}
	if c.aenEnabled&aenNamespaceAttr != 0 && !c.aenMaskedNS {
		c.aenPending = true
	}
	a, ok := c.takeAERLocked()
	c.mu.Unlock()
	if ok {
		a.qp.completeParked(a.cid, completion{dw0: aenNoticeNSChanged})
	}
}

// takeAERLocked pairs a pending event with a waiting AER.
func (c *controller) takeAERLocked() (pendingAER, bool) {
	if !c.aenPending || len(c.aers) == 0 {
		return pendingAER{}, false
	}
	a := c.aers[0]
	c.aers = c.aers[1:]
	c.aenPending = false
	c.aenMaskedNS = true
	return a, true
}

// recordError appends an Error Information log entry:
//
//	bytes 0-7   error count
//	bytes 8-9   SQID
//	bytes 10-11 CID
//	bytes 12-13 status field (with phase bit 0)
//	bytes 14-15 parameter error location (0xFFFF: unknown)
//	bytes 16-23 LBA
//	bytes 24-27 NSID
//	byte  28    vendor specific information available: the log page that
//	            has it (nvme.LogFunctionRefusals for a refused Function
//	            Load), 0 if none
func (c *controller) recordError(qid, cid uint16, st nvme.Status, nsid uint32, lba uint64, vendorLog uint8) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errorCount++
	e := &c.errorLog[c.errorNext]
	c.errorNext = (c.errorNext + 1) % errorLogEntries
	*e = [64]byte{}
	le64(e[0:], c.errorCount)
	le16(e[8:], qid)
	le16(e[10:], cid)
	le16(e[12:], uint16(st)<<1)
	le16(e[14:], 0xFFFF)
	le64(e[16:], lba)
	le32(e[24:], nsid)
	e[28] = vendorLog
}

// instanced is a backend whose bytes live only as long as the object (a
// RAM volume). Its namespace identifiers include the instance, so a host
// reconnecting to a target that serves a new, empty backend under the
// same name sees another namespace, and refuses to go on as if it were the
// old one, rather than the old one's identifiers.
type instanced interface{ Instance() string }

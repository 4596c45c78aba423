package target

import (
	"context"
	"net"
	"sort"
	"strconv"
	"time"

	"github.com/nearstore/nearstore/nvme"
)

// The admin command set, with nearstore's vendor admin commands
// (cmds_vendor.go). Standard admin commands are quick and run on the
// reader; an AER is parked rather than waited for.
func adminCommands() map[uint8]*cmdSpec {
	return map[uint8]*cmdSpec{
		nvme.AdminIdentify:    {dir: dirOut, discovery: true, exec: identify},
		nvme.AdminGetLogPage:  {dir: dirOut, discovery: true, exec: getLogPage},
		nvme.AdminSetFeatures: {dir: dirIn, discovery: true, check: checkSetFeatures, exec: setFeatures},
		nvme.AdminGetFeatures: {dir: dirNone, discovery: true, exec: getFeatures},
		nvme.AdminKeepAlive:   {dir: dirNone, discovery: true, exec: keepAlive},
		nvme.AdminAsyncEvent:  {dir: dirNone, discovery: true, exec: asyncEvent},
		nvme.AdminAbort:       {dir: dirNone, exec: abortCommand},

		nvme.AdminFunctionLoad:   {dir: dirIn, blocking: true, check: checkFunctionLoad, exec: functionLoad},
		nvme.AdminFunctionUnload: {dir: dirIn, blocking: true, check: checkFunctionUnload, exec: functionUnload},
		nvme.AdminFunctionList:   {dir: dirOut, blocking: true, exec: functionList},
		nvme.AdminExtentMapPut:   {label: "extent_map_put", dir: dirIn, blocking: true, check: checkExtentMapPut, exec: extentMapPut},
		nvme.AdminExtentMapQuery: {label: "extent_map_query", dir: dirBoth, blocking: true, check: checkNotDiscovery, exec: extentMapQuery},
		nvme.AdminGrantPut:       {label: "grant_put", dir: dirIn, blocking: true, check: checkGrantPut, exec: grantPut},
		nvme.AdminGrantRelease:   {label: "grant_release", dir: dirNone, blocking: true, exec: grantRelease},
	}
}

// checkSetFeatures: Set Features Timestamp brings the 8-byte timestamp.
func checkSetFeatures(_ *session, r *request) (int, nvme.Status) {
	if uint8(r.sqe.CDW10) == nvme.FeatTimestamp {
		return 8, 0
	}
	return 0, 0
}

func keepAlive(_ context.Context, s *session, _ *request) completion {
	if s.ctrl.kato == 0 {
		return status(nvme.StatusKATimeoutInvalid)
	}
	return completion{}
}

// asyncEvent parks an Asynchronous Event Request until there is an event
// to report, or completes it at once if one is waiting.
func asyncEvent(_ context.Context, s *session, r *request) completion {
	c := s.ctrl
	c.mu.Lock()
	if len(c.aers) >= maxAER {
		c.mu.Unlock()
		return status(nvme.StatusAsyncLimit | nvme.DNR)
	}
	// Parked before it is published: from here on, r belongs to whoever
	// completes it.
	r.to(reqExecuting, reqParked)
	c.aers = append(c.aers, pendingAER{qp: s.qp, cid: r.sqe.CID})
	a, ok := c.takeAERLocked()
	c.mu.Unlock()
	if ok {
		a.qp.completeParked(a.cid, completion{dw0: aenNoticeNSChanged})
	}
	return completion{parked: true}
}

// abortCommand: commands run to completion quickly or are parked AERs; like the
// Linux target, report "not aborted" (DW0 bit 0) and let it finish.
func abortCommand(context.Context, *session, *request) completion { return completion{dw0: 1} }

// identify answers Identify by CNS; the I/O command set ones are in
// iocs.go.
func identify(_ context.Context, s *session, r *request) completion {
	sqe := &r.sqe
	cns := uint8(sqe.CDW10)
	csi := uint8(sqe.CDW11 >> 24)
	switch {
	case cns == nvme.CNSController:
		return dataCompletion(r, s.identifyController())
	case s.discovery:
		return status(nvme.StatusInvalidField | nvme.DNR)
	case cns == nvme.CNSNamespace:
		if sqe.NSID == 0 || sqe.NSID == 0xFFFFFFFF {
			return status(nvme.StatusInvalidNamespace | nvme.DNR)
		}
		ns := s.ss.namespace(sqe.NSID)
		if ns == nil {
			// An inactive NSID reads as zeroes, as the spec asks.
			return dataCompletion(r, make([]byte, nvme.IdentifySize))
		}
		if ns.kv != nil {
			// CNS 00h is the NVM command set's structure; a KV
			// namespace's is CNS 05h with CSI 01h.
			return status(nvme.StatusInvalidIOCS | nvme.DNR)
		}
		id := nvme.IdentifyNamespace{
			NSZE: ns.blocks, NCAP: ns.blocks, NUSE: ns.blocks,
			NSFEAT: 1<<0 | 1<<2, // thin provisioned; DLFEAT is honoured
			NMIC:   1,
			RESCAP: nvmRescap,
			DLFEAT: 1<<3 | 1, // deallocated blocks read as zeroes; Write Zeroes can deallocate
			NGUID:  ns.nguid,
			LBADS:  ns.lbaShift,
		}
		return dataCompletion(r, id.Marshal())
	case cns == nvme.CNSActiveNSList:
		return identifyActiveNSList(s, r, false, 0)
	case cns == nvme.CNSCSActiveNSList:
		return identifyActiveNSList(s, r, true, csi)
	case cns == nvme.CNSNSDescriptors:
		ns := s.ss.namespace(sqe.NSID)
		if ns == nil {
			return status(nvme.StatusInvalidNamespace | nvme.DNR)
		}
		return dataCompletion(r, nvme.MarshalNSDescriptors([]nvme.NSDescriptor{
			{Type: nvme.NIDTNGUID, ID: ns.nguid[:]},
			{Type: nvme.NIDTUUID, ID: ns.uuid[:]},
			{Type: nvme.NIDTCSI, ID: []byte{ns.csi()}},
		}))
	case cns == nvme.CNSCSNamespace:
		return identifyCSNamespace(s, r, csi)
	case cns == nvme.CNSCSController:
		return identifyCSController(r, csi)
	case cns == nvme.CNSCSIndependentNS:
		return identifyIndependent(s, r)
	case cns == nvme.CNSIOCommandSets:
		return identifyIOCS(r)
	default:
		return status(nvme.StatusInvalidField | nvme.DNR)
	}
}

// nvmRescap is an NVM namespace's reservation capabilities: every
// reservation type, no PTPL (reservations.go).
const nvmRescap = nvme.RescapAllTypes | nvme.RescapIEKEY13

func (s *session) identifyController() []byte {
	c := s.ctrl
	ss := s.ss
	id := nvme.IdentifyController{
		Serial:       ss.serial,
		Model:        ss.model,
		Firmware:     FirmwareRevision,
		RAB:          6,
		CMIC:         1<<0 | 1<<1, // multiple ports, multiple controllers
		MDTS:         s.srv.cfg.MDTS,
		CNTLID:       c.id,
		Version:      targetVersion,
		OAES:         aenNamespaceAttr,
		CTRATT:       nvme.CTRATTHostID128 | nvme.CTRATTTrafficBasedKeepAlive,
		CNTRLTYPE:    1,
		ACL:          3,
		AERL:         maxAER - 1,
		FRMW:         1<<0 | 1<<1,
		LPA:          1<<1 | 1<<2, // Commands Supported and Effects (per CSI); extended data (offsets)
		ELPE:         errorLogEntries - 1,
		KAS:          1, // keep alive granularity: 100 ms
		SQES:         6<<4 | 6,
		CQES:         4<<4 | 4,
		MAXCMD:       uint16(min(s.srv.cfg.QueueDepth, 0xFFFF)),
		NN:           1024,
		ONCS:         nvme.ONCSDSM | nvme.ONCSWriteZeroes | nvme.ONCSReservations,
		VWC:          1,
		SGLS:         1<<0 | 1<<20, // SGLs supported; address as offset (in-capsule data)
		MNAN:         1024,
		SubNQN:       ss.nqn,
		IOCCSZ:       uint32((nvme.CommandSize + s.srv.cfg.InCapsuleData) / 16),
		IORCSZ:       nvme.CompletionSize / 16,
		MSDBD:        1,
		PowerState0:  0x9c4,
		VendorString: "nearstore",
	}
	if s.discovery {
		id.CNTRLTYPE = 2
		id.OAES, id.ONCS, id.VWC, id.NN, id.MNAN, id.IOCCSZ = 0, 0, 0, 0, 0, 0
		id.LPA &^= 1 << 1 // its only log is the discovery log
		id.MDTS = 0
	}
	return id.Marshal()
}

// FirmwareRevision is reported in Identify Controller and the firmware log.
const FirmwareRevision = "0.1"

func getLogPage(_ context.Context, s *session, r *request) completion {
	var g nvme.GetLogPageCommand
	g.FromCommand(&r.sqe)
	if _, st := s.transferLen(r, uint64(g.Length)); st != 0 {
		return status(st)
	}
	var page []byte
	c := s.ctrl
	switch {
	case g.LID == nvme.LogDiscovery && s.discovery:
		page = s.discoveryLog()
	case s.discovery:
		return status(nvme.StatusInvalidField | nvme.DNR)
	case g.LID == nvme.LogError:
		page = make([]byte, 64*errorLogEntries)
		c.mu.Lock()
		for i := 0; i < errorLogEntries; i++ { // newest first
			copy(page[64*i:], c.errorLog[(c.errorNext-1-i+2*errorLogEntries)%errorLogEntries][:])
		}
		c.mu.Unlock()
	case g.LID == nvme.LogSMART:
		page = s.smartLog()
	case g.LID == nvme.LogCmdEffects:
		var st nvme.Status
		if page, st = s.effectsLog(g.CSI); st != 0 {
			return status(st)
		}
	case g.LID == nvme.LogFunctionRefusals:
		page = c.refusalLog()
	case g.LID == nvme.LogFirmwareSlot:
		page = make([]byte, 512)
		page[0] = 1 // active firmware: slot 1
		copy(page[8:16], FirmwareRevision+"       ")
	case g.LID == nvme.LogChangedNS:
		page = make([]byte, 4096)
		c.mu.Lock()
		ids := make([]uint32, 0, len(c.changedNS))
		for id := range c.changedNS {
			ids = append(ids, id)
		}
		if !g.RAE {
			clear(c.changedNS)
			c.aenMaskedNS = false
		}
		c.mu.Unlock()
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for i, id := range ids {
			le32(page[4*i:], id)
		}
	default:
		return status(nvme.StatusInvalidField | nvme.DNR)
	}
	if g.Offset > uint64(len(page)) || g.Offset%4 != 0 {
		return status(nvme.StatusInvalidField | nvme.DNR)
	}
	n, st := s.transferLen(r, uint64(g.Length))
	if st != 0 {
		return status(st)
	}
	out := r.resultBuf(n)
	clear(out[copy(out, page[g.Offset:]):])
	return completion{data: out}
}

// smartLog builds the SMART / Health Information log (512 bytes): byte 1-2
// composite temperature (kelvin), 3 available spare, 4 its threshold, 32
// data units read and 48 written (thousands of 512-byte units), 64 host read
// and 80 host write commands, 128 power-on hours, 160 media errors, 176
// error log entries.
func (s *session) smartLog() []byte {
	c := s.ctrl
	p := make([]byte, 512)
	le16(p[1:], 273+35)
	p[3], p[4] = 100, 10
	c.mu.Lock()
	errs := c.errorCount
	c.mu.Unlock()
	sm := &c.smart
	le128(p[32:], (sm.readBlocks512.Load()+999)/1000)
	le128(p[48:], (sm.writeBlocks512.Load()+999)/1000)
	le128(p[64:], sm.readCmds.Load())
	le128(p[80:], sm.writeCmds.Load())
	le128(p[128:], uint64(time.Since(c.created).Hours()))
	le128(p[160:], sm.mediaErrors.Load())
	le128(p[176:], errs)
	return p
}

// discoveryLog lists, at the address the host reached us on, every
// subsystem the asking host may connect to.
func (s *session) discoveryLog() []byte {
	host, port, _ := net.SplitHostPort(s.local.String())
	fam := uint8(nvme.AdrFamIPv4)
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		fam = nvme.AdrFamIPv6
	}
	entries := make([]nvme.DiscoveryEntry, 0, len(s.srv.order))
	for _, ss := range s.srv.order {
		if !ss.admits(s.ctrl.hostNQN) {
			continue
		}
		entries = append(entries, nvme.DiscoveryEntry{
			TrType: nvme.TrTypeTCP, AdrFam: fam, SubType: nvme.SubTypeNVM,
			Treq: nvme.TreqNotRequired, PortID: 1, CNTLID: 0xFFFF,
			ASQSZ: 32, TrSvcID: port, SubNQN: ss.nqn, TrAddr: host,
		})
	}
	return nvme.MarshalDiscoveryLog(uint64(len(entries)), entries)
}

func setFeatures(_ context.Context, s *session, r *request) completion {
	c := s.ctrl
	fid := uint8(r.sqe.CDW10)
	if r.sqe.CDW10&(1<<31) != 0 {
		return status(nvme.StatusFeatureNotSaveable | nvme.DNR)
	}
	v := r.sqe.CDW11
	c.mu.Lock()
	defer c.mu.Unlock()
	switch fid {
	case nvme.FeatNumQueues:
		nsqr, ncqr := v&0xffff, v>>16
		if nsqr == 0xffff || ncqr == 0xffff || s.discovery {
			return status(nvme.StatusInvalidField | nvme.DNR)
		}
		c.ioQueues = min(int(max(nsqr, ncqr))+1, s.srv.cfg.MaxIOQueues)
		n := uint32(c.ioQueues - 1)
		return completion{dw0: n | n<<16}
	case nvme.FeatKeepAliveTimer:
		c.kato = time.Duration(v) * time.Millisecond
		c.armKeepAliveLocked()
		return completion{}
	case nvme.FeatAsyncEventConfig:
		c.aenEnabled = v
		return completion{dw0: v}
	case nvme.FeatVolatileWC:
		c.vwc = v&1 != 0
		return completion{}
	case nvme.FeatIOCSProfile:
		if s.discovery {
			return status(nvme.StatusInvalidField | nvme.DNR)
		}
		return ioCSProfile(v)
	case nvme.FeatTimestamp, nvme.FeatArbitration, nvme.FeatPowerManagement,
		nvme.FeatTempThreshold, nvme.FeatErrorRecovery, nvme.FeatIRQCoalesce,
		nvme.FeatWriteAtomicity:
		return completion{}
	}
	return status(nvme.StatusInvalidField | nvme.DNR)
}

func getFeatures(_ context.Context, s *session, r *request) completion {
	c := s.ctrl
	c.mu.Lock()
	defer c.mu.Unlock()
	switch uint8(r.sqe.CDW10) {
	case nvme.FeatNumQueues:
		n := uint32(c.ioQueues - 1)
		return completion{dw0: n | n<<16}
	case nvme.FeatKeepAliveTimer:
		return completion{dw0: uint32(c.kato / time.Millisecond)}
	case nvme.FeatAsyncEventConfig:
		return completion{dw0: c.aenEnabled}
	case nvme.FeatVolatileWC:
		if c.vwc {
			return completion{dw0: 1}
		}
		return completion{}
	case nvme.FeatArbitration, nvme.FeatPowerManagement, nvme.FeatErrorRecovery,
		nvme.FeatIRQCoalesce, nvme.FeatWriteAtomicity:
		return completion{}
	case nvme.FeatIOCSProfile:
		// The combination in use: index 0, the only one.
		if s.discovery {
			return status(nvme.StatusInvalidField | nvme.DNR)
		}
		return completion{}
	case nvme.FeatTempThreshold:
		return completion{dw0: 273 + 70}
	}
	return status(nvme.StatusInvalidField | nvme.DNR)
}

// nsLabel is the metrics label of a namespace.
func nsLabel(id uint32) string { return strconv.FormatUint(uint64(id), 10) }

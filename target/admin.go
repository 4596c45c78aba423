package target

import (
	"net"
	"sort"
	"strconv"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// prepare checks a command before any of its data is accepted and says how
// many bytes of host-to-controller data it needs. A write to a namespace
// that does not exist, or past its end, fails here, before an R2T asks the
// host for data that would be thrown away.
func (q *queue) prepare(cmd *command) (want int, st nvme.Status) {
	sqe := &cmd.sqe
	dataCmd := false
	if sqe.Opcode == nvme.AdminFabrics {
		if sqe.FabricsType() == nvme.FabricsConnect {
			want, dataCmd = nvme.ConnectDataSize, true
		}
	} else if q.ctrl == nil {
		return 0, 0 // dispatch answers Command Sequence Error
	} else if q.qid == 0 {
		switch sqe.Opcode {
		case nvme.AdminSetFeatures:
			if uint8(sqe.CDW10) == nvme.FeatTimestamp {
				want, dataCmd = 8, true
			}
		case nvme.AdminGetLogPage, nvme.AdminIdentify, nvme.AdminAbort, nvme.AdminGetFeatures,
			nvme.AdminAsyncEvent, nvme.AdminKeepAlive, nvme.AdminFunctionList:
		case nvme.AdminFunctionLoad:
			n := int(sqe.CDW11)
			if q.discovery || n <= 0 || n > maxModuleSize || n != int(sqe.DPTR.Length) {
				return 0, nvme.StatusInvalidField | nvme.DNR
			}
			want, dataCmd = n, true
		case nvme.AdminFunctionUnload:
			if q.discovery {
				return 0, nvme.StatusInvalidOpcode | nvme.DNR
			}
			want, dataCmd = len(sandbox.ID{}), true
		case nvme.AdminExtentMapPut, nvme.AdminGrantPut:
			if q.discovery {
				return 0, nvme.StatusInvalidOpcode | nvme.DNR
			}
			lo, hi := pushdown.MapPutHeaderSize, q.maxXfer
			if sqe.Opcode == nvme.AdminGrantPut {
				lo, hi = pushdown.GrantHeaderSize, pushdown.GrantHeaderSize+pushdown.ExtentSize*pushdown.MaxGrantExtents
			}
			n := int(sqe.DPTR.Length)
			if n < lo || n > hi {
				return 0, nvme.StatusSGLDataLenInvalid | nvme.DNR
			}
			want, dataCmd = n, true
		case nvme.AdminExtentMapQuery:
			// Inodes in the capsule, versions back by C2HData, as the
			// bidirectional I/O commands do (handleCapsule).
			if q.discovery {
				return 0, nvme.StatusInvalidOpcode | nvme.DNR
			}
			cmd.bidir, dataCmd = true, true
		case nvme.AdminGrantRelease:
		default:
			// No other admin command takes data from the host; refuse
			// before an R2T asks for it.
			if nvme.DataDirection(sqe.Opcode)&nvme.DirHostToCtrl != 0 {
				return 0, nvme.StatusInvalidOpcode | nvme.DNR
			}
		}
	} else {
		var ok bool
		if want, st, ok = q.prepareIO(cmd); !ok {
			return 0, st
		}
		dataCmd = want > 0
	}
	if dataCmd && sqe.Flags&0xC0 != nvme.PSDTSGL {
		return 0, nvme.StatusInvalidField | nvme.DNR
	}
	return want, 0
}

// admin runs an admin command inline on the reader goroutine: all of them
// are quick, and an AER is parked rather than waited for.
func (q *queue) admin(cmd *command) {
	c := q.ctrl
	c.mu.Lock()
	ready := c.csts&nvme.CSTSReady != 0
	c.mu.Unlock()
	if !ready {
		q.complete(cmd, nvme.StatusCommandSequence|nvme.DNR, 0)
		return
	}
	sqe := &cmd.sqe
	if q.discovery {
		switch sqe.Opcode {
		case nvme.AdminIdentify, nvme.AdminGetLogPage, nvme.AdminKeepAlive,
			nvme.AdminSetFeatures, nvme.AdminGetFeatures, nvme.AdminAsyncEvent:
		default:
			q.complete(cmd, nvme.StatusInvalidOpcode|nvme.DNR, 0)
			return
		}
	}
	switch sqe.Opcode {
	case nvme.AdminIdentify:
		q.identify(cmd)
	case nvme.AdminGetLogPage:
		q.getLogPage(cmd)
	case nvme.AdminSetFeatures:
		st, dw0 := q.setFeatures(cmd)
		q.complete(cmd, st, dw0)
	case nvme.AdminGetFeatures:
		st, dw0 := q.getFeatures(cmd)
		q.complete(cmd, st, dw0)
	case nvme.AdminKeepAlive:
		if c.kato == 0 {
			q.complete(cmd, nvme.StatusKATimeoutInvalid, 0)
			return
		}
		q.complete(cmd, nvme.StatusSuccess, 0)
	case nvme.AdminAsyncEvent:
		c.mu.Lock()
		if len(c.aers) >= maxAER {
			c.mu.Unlock()
			q.complete(cmd, nvme.StatusAsyncLimit|nvme.DNR, 0)
			return
		}
		c.aers = append(c.aers, pendingAER{q: q, cid: sqe.CID})
		a, ok := c.takeAERLocked()
		c.mu.Unlock()
		if ok {
			a.q.completeAER(a.cid, aenNoticeNSChanged)
		}
	case nvme.AdminAbort:
		// Commands run to completion quickly or are parked AERs; like the
		// Linux target, report "not aborted" (DW0 bit 0) and let it finish.
		q.complete(cmd, nvme.StatusSuccess, 1)
	default:
		q.complete(cmd, nvme.StatusInvalidOpcode|nvme.DNR, 0)
	}
}

// sendData checks that the command's SGL can take n bytes to the host and
// completes it with them.
func (q *queue) sendData(cmd *command, data []byte) {
	sgl := cmd.sqe.DPTR
	if sgl.Type != nvme.SGLTransportDataBlock {
		q.complete(cmd, nvme.StatusSGLTypeInvalid|nvme.DNR, 0)
		return
	}
	if int(sgl.Length) < len(data) {
		data = data[:sgl.Length]
	}
	q.completeWith(cmd, nvme.StatusSuccess, 0, 0, data)
}

func (q *queue) identify(cmd *command) {
	sqe := &cmd.sqe
	cns := uint8(sqe.CDW10)
	csi := uint8(sqe.CDW11 >> 24)
	switch {
	case cns == nvme.CNSController:
		q.sendData(cmd, q.identifyController())
	case q.discovery:
		q.complete(cmd, nvme.StatusInvalidField|nvme.DNR, 0)
	case cns == nvme.CNSNamespace:
		if sqe.NSID == 0 || sqe.NSID == 0xFFFFFFFF {
			q.complete(cmd, nvme.StatusInvalidNamespace|nvme.DNR, 0)
			return
		}
		ns := q.ss.namespace(sqe.NSID)
		if ns == nil {
			// An inactive NSID reads as zeroes, as the spec asks.
			q.sendData(cmd, make([]byte, nvme.IdentifySize))
			return
		}
		id := nvme.IdentifyNamespace{
			NSZE: ns.blocks, NCAP: ns.blocks, NUSE: ns.blocks,
			NSFEAT: 1<<0 | 1<<2, // thin provisioned; DLFEAT is honoured
			NMIC:   1,
			// Every reservation type, no PTPL (reservations.go).
			RESCAP: nvme.RescapAllTypes | nvme.RescapIEKEY13,
			DLFEAT: 1<<3 | 1, // deallocated blocks read as zeroes; Write Zeroes can deallocate
			NGUID:  ns.nguid,
			LBADS:  ns.lbaShift,
		}
		q.sendData(cmd, id.Marshal())
	case cns == nvme.CNSActiveNSList:
		list := make([]byte, nvme.IdentifySize)
		i := 0
		for _, id := range q.ss.nsids() {
			if id > sqe.NSID && i < nvme.IdentifySize/4 {
				le32(list[4*i:], id)
				i++
			}
		}
		q.sendData(cmd, list)
	case cns == nvme.CNSNSDescriptors && csi == 0:
		ns := q.ss.namespace(sqe.NSID)
		if ns == nil {
			q.complete(cmd, nvme.StatusInvalidNamespace|nvme.DNR, 0)
			return
		}
		q.sendData(cmd, nvme.MarshalNSDescriptors([]nvme.NSDescriptor{
			{Type: nvme.NIDTNGUID, ID: ns.nguid[:]},
			{Type: nvme.NIDTUUID, ID: ns.uuid[:]},
			{Type: nvme.NIDTCSI, ID: []byte{0}},
		}))
	case cns == nvme.CNSCSController && csi == 0:
		// The NVM command set's controller structure: nothing to report.
		q.sendData(cmd, make([]byte, nvme.IdentifySize))
	default:
		q.complete(cmd, nvme.StatusInvalidField|nvme.DNR, 0)
	}
}

func (q *queue) identifyController() []byte {
	c := q.ctrl
	ss := q.ss
	id := nvme.IdentifyController{
		Serial:       ss.serial,
		Model:        ss.model,
		Firmware:     FirmwareRevision,
		RAB:          6,
		CMIC:         1<<0 | 1<<1, // multiple ports, multiple controllers
		MDTS:         q.srv.cfg.MDTS,
		CNTLID:       c.id,
		Version:      targetVersion,
		OAES:         aenNamespaceAttr,
		CTRATT:       nvme.CTRATTHostID128 | nvme.CTRATTTrafficBasedKeepAlive,
		CNTRLTYPE:    1,
		ACL:          3,
		AERL:         maxAER - 1,
		FRMW:         1<<0 | 1<<1,
		LPA:          1 << 2, // extended data for Get Log Page (offsets)
		ELPE:         errorLogEntries - 1,
		KAS:          1, // keep alive granularity: 100 ms
		SQES:         6<<4 | 6,
		CQES:         4<<4 | 4,
		MAXCMD:       uint16(min(q.srv.cfg.QueueDepth, 0xFFFF)),
		NN:           1024,
		ONCS:         nvme.ONCSDSM | nvme.ONCSWriteZeroes | nvme.ONCSReservations,
		VWC:          1,
		SGLS:         1<<0 | 1<<20, // SGLs supported; address as offset (in-capsule data)
		MNAN:         1024,
		SubNQN:       ss.nqn,
		IOCCSZ:       uint32((nvme.CommandSize + q.srv.cfg.InCapsuleData) / 16),
		IORCSZ:       nvme.CompletionSize / 16,
		MSDBD:        1,
		PowerState0:  0x9c4,
		VendorString: "nearstore",
	}
	if q.discovery {
		id.CNTRLTYPE = 2
		id.OAES, id.ONCS, id.VWC, id.NN, id.MNAN, id.IOCCSZ = 0, 0, 0, 0, 0, 0
		id.MDTS = 0
	}
	return id.Marshal()
}

// FirmwareRevision is reported in Identify Controller and the firmware log.
const FirmwareRevision = "0.1"

func (q *queue) getLogPage(cmd *command) {
	var g nvme.GetLogPageCommand
	g.FromCommand(&cmd.sqe)
	var page []byte
	c := q.ctrl
	switch {
	case g.LID == nvme.LogDiscovery && q.discovery:
		page = q.discoveryLog()
	case q.discovery:
		q.complete(cmd, nvme.StatusInvalidField|nvme.DNR, 0)
		return
	case g.LID == nvme.LogError:
		page = make([]byte, 64*errorLogEntries)
		c.mu.Lock()
		for i := 0; i < errorLogEntries; i++ { // newest first
			copy(page[64*i:], c.errorLog[(c.errorNext-1-i+2*errorLogEntries)%errorLogEntries][:])
		}
		c.mu.Unlock()
	case g.LID == nvme.LogSMART:
		page = q.smartLog()
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
		q.complete(cmd, nvme.StatusInvalidField|nvme.DNR, 0)
		return
	}
	if g.Offset > uint64(len(page)) || g.Offset%4 != 0 {
		q.complete(cmd, nvme.StatusInvalidField|nvme.DNR, 0)
		return
	}
	out := make([]byte, g.Length)
	copy(out, page[g.Offset:])
	q.sendData(cmd, out)
}

// smartLog builds the SMART / Health Information log (512 bytes): byte 1-2
// composite temperature (kelvin), 3 available spare, 4 its threshold, 32
// data units read and 48 written (thousands of 512-byte units), 64 host read
// and 80 host write commands, 128 power-on hours, 160 media errors, 176
// error log entries.
func (q *queue) smartLog() []byte {
	c := q.ctrl
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

// discoveryLog lists every subsystem at the address the host reached us on.
func (q *queue) discoveryLog() []byte {
	host, port, _ := net.SplitHostPort(q.conn.LocalAddr().String())
	fam := uint8(nvme.AdrFamIPv4)
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		fam = nvme.AdrFamIPv6
	}
	entries := make([]nvme.DiscoveryEntry, 0, len(q.srv.order))
	for _, ss := range q.srv.order {
		entries = append(entries, nvme.DiscoveryEntry{
			TrType: nvme.TrTypeTCP, AdrFam: fam, SubType: nvme.SubTypeNVM,
			Treq: nvme.TreqNotRequired, PortID: 1, CNTLID: 0xFFFF,
			ASQSZ: 32, TrSvcID: port, SubNQN: ss.nqn, TrAddr: host,
		})
	}
	return nvme.MarshalDiscoveryLog(uint64(len(entries)), entries)
}

func (q *queue) setFeatures(cmd *command) (nvme.Status, uint32) {
	c := q.ctrl
	fid := uint8(cmd.sqe.CDW10)
	if cmd.sqe.CDW10&(1<<31) != 0 {
		return nvme.StatusFeatureNotSaveable | nvme.DNR, 0
	}
	v := cmd.sqe.CDW11
	c.mu.Lock()
	defer c.mu.Unlock()
	switch fid {
	case nvme.FeatNumQueues:
		nsqr, ncqr := v&0xffff, v>>16
		if nsqr == 0xffff || ncqr == 0xffff || q.discovery {
			return nvme.StatusInvalidField | nvme.DNR, 0
		}
		c.ioQueues = min(int(max(nsqr, ncqr))+1, q.srv.cfg.MaxIOQueues)
		n := uint32(c.ioQueues - 1)
		return nvme.StatusSuccess, n | n<<16
	case nvme.FeatKeepAliveTimer:
		c.kato = time.Duration(v) * time.Millisecond
		if c.kaTimer != nil {
			c.kaTimer.Stop()
			c.kaTimer = nil
		}
		if c.kato > 0 {
			c.kaTimer = time.AfterFunc(c.kato, c.keepAliveExpired)
		}
		return nvme.StatusSuccess, 0
	case nvme.FeatAsyncEventConfig:
		c.aenEnabled = v
		return nvme.StatusSuccess, v
	case nvme.FeatVolatileWC:
		c.vwc = v&1 != 0
		return nvme.StatusSuccess, 0
	case nvme.FeatTimestamp, nvme.FeatArbitration, nvme.FeatPowerManagement,
		nvme.FeatTempThreshold, nvme.FeatErrorRecovery, nvme.FeatIRQCoalesce,
		nvme.FeatWriteAtomicity:
		return nvme.StatusSuccess, 0
	}
	return nvme.StatusInvalidField | nvme.DNR, 0
}

func (q *queue) getFeatures(cmd *command) (nvme.Status, uint32) {
	c := q.ctrl
	c.mu.Lock()
	defer c.mu.Unlock()
	switch uint8(cmd.sqe.CDW10) {
	case nvme.FeatNumQueues:
		n := uint32(c.ioQueues - 1)
		return nvme.StatusSuccess, n | n<<16
	case nvme.FeatKeepAliveTimer:
		return nvme.StatusSuccess, uint32(c.kato / time.Millisecond)
	case nvme.FeatAsyncEventConfig:
		return nvme.StatusSuccess, c.aenEnabled
	case nvme.FeatVolatileWC:
		if c.vwc {
			return nvme.StatusSuccess, 1
		}
		return nvme.StatusSuccess, 0
	case nvme.FeatArbitration, nvme.FeatPowerManagement, nvme.FeatErrorRecovery,
		nvme.FeatIRQCoalesce, nvme.FeatWriteAtomicity:
		return nvme.StatusSuccess, 0
	case nvme.FeatTempThreshold:
		return nvme.StatusSuccess, 273 + 70
	}
	return nvme.StatusInvalidField | nvme.DNR, 0
}

// nsLabel is the metrics label of a namespace.
func nsLabel(id uint32) string { return strconv.FormatUint(uint64(id), 10) }

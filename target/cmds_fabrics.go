package target

import (
	"context"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/auth"
)

// targetVersion is the NVMe version nearstore reports (VS, Identify VER):
// 1.3, whose admin commands and identify structures it implements.
var targetVersion = nvme.Version(1, 3, 0)

// connectInvalid is the DW0 of a Connect Invalid Parameters completion:
// IATTR (bit 0: 1 = the bad field is in the data) and IPO (bits 31:16, its
// byte offset).
func connectInvalid(inData bool, offset uint16) uint32 {
	v := uint32(offset) << 16
	if inData {
		v |= 1
	}
	return v
}

// The Fabrics command set: Connect, Property Get and Property Set, and
// Authentication Send and Receive (auth.go), on any queue. Keyed by
// Fabrics command type.
func fabricsCommands() map[uint8]*cmdSpec {
	return map[uint8]*cmdSpec{
		nvme.FabricsConnect:     {dir: dirIn, check: checkConnect, exec: connect},
		nvme.FabricsPropertyGet: {dir: dirNone, exec: propertyGet},
		nvme.FabricsPropertySet: {dir: dirNone, exec: propertySet},
		auth.FabricsAuthSend:    {label: "auth_send", dir: dirIn, check: checkAuthSend, exec: authSend},
		auth.FabricsAuthReceive: {label: "auth_receive", dir: dirOut, exec: authReceive},
	}
}

func checkConnect(*session, *request) (int, nvme.Status) { return nvme.ConnectDataSize, 0 }

// maxAdminDepth bounds the admin queue, as Linux nvmet's NVMET_MAX_CMD
// for the admin queue (32): admin commands are few and slow, and each may
// hold a buffer of up to MDTS.
const maxAdminDepth = 32

// connect runs a Fabrics Connect: queue 0 creates a controller, any other
// queue joins the controller named in the data. It binds the session; the
// connection layer then applies what the host asked of the transport.
func connect(_ context.Context, s *session, r *request) completion {
	if s.ctrl != nil {
		return status(nvme.StatusCommandSequence | nvme.DNR)
	}
	var cc nvme.ConnectCommand
	cc.FromCommand(&r.sqe)
	var cd nvme.ConnectData
	if err := cd.Unmarshal(r.data); err != nil {
		return status(nvme.StatusSGLDataLenInvalid | nvme.DNR)
	}
	bad := func(inData bool, off uint16) completion {
		return completion{status: nvme.StatusConnectInvalidParameters | nvme.DNR, dw0: connectInvalid(inData, off)}
	}
	if cc.RecFmt != 0 {
		return status(nvme.StatusConnectIncompatibleFormat | nvme.DNR)
	}
	srv := s.srv
	ss := srv.subsys[cd.SubNQN]
	if cd.SubNQN == nvme.DiscoveryNQN {
		ss = srv.disc
	}
	if ss == nil {
		s.log.Info("connect to unknown subsystem", "nqn", cd.SubNQN, "host", cd.HostNQN)
		return bad(true, 256)
	}
	// Access control, for the admin queue and every I/O queue alike. The
	// discovery controller admits every host, as in nvmet; its log lists
	// only what the host may connect to.
	if cd.HostNQN == "" {
		return bad(true, 512)
	}
	if ss != srv.disc && !ss.admits(cd.HostNQN) {
		s.log.Warn("connect refused: host not allowed", "subsystem", ss.nqn, "host", cd.HostNQN)
		srv.metrics.error("host_not_allowed")
		return completion{status: nvme.StatusConnectInvalidHost | nvme.DNR, dw0: connectInvalid(true, 512)}
	}
	depth := int(cc.SQSize) + 1
	if cc.SQSize == 0 || depth > srv.cfg.QueueDepth || (cc.QID == 0 && depth > maxAdminDepth) {
		return bad(false, 44)
	}
	var ctrl *controller
	if cc.QID == 0 {
		if cd.CNTLID != 0xFFFF {
			return bad(true, 16)
		}
		kato := time.Duration(cc.KATO) * time.Millisecond
		var err error
		ctrl, err = ss.newController(cd.HostNQN, cd.HostID, kato, ss == srv.disc)
		if err != nil {
			return status(nvme.StatusConnectControllerBusy | nvme.DNR)
		}
		_ = ctrl.attach(0, s.qp)
	} else {
		ctrl = ss.controller(cd.CNTLID)
		if ctrl == nil || ctrl.discovery {
			return bad(true, 16)
		}
		// An I/O queue joins only its own host's association: the
		// CNTLID, host NQN and host ID must all be the admin queue's.
		if ctrl.hostNQN != cd.HostNQN {
			return bad(true, 512)
		}
		if ctrl.hostID != cd.HostID {
			return bad(true, 0)
		}
		ctrl.mu.Lock()
		ready, nq := ctrl.csts&nvme.CSTSReady != 0, ctrl.ioQueues
		ctrl.mu.Unlock()
		if !ready {
			return status(nvme.StatusCommandSequence | nvme.DNR)
		}
		if int(cc.QID) > nq {
			return bad(false, 42)
		}
		if err := ctrl.attach(cc.QID, s.qp); err != nil {
			return bad(false, 42)
		}
	}
	s.ctrl, s.ss, s.qid, s.depth = ctrl, ss, cc.QID, depth
	s.discovery = ctrl.discovery
	s.noSQFlow = cc.CAttr&(1<<2) != 0
	s.maxXfer = 4096 << srv.cfg.MDTS
	s.log = s.log.With("subsystem", ss.nqn, "cntlid", ctrl.id, "qid", cc.QID)
	authReq, err := s.startAuth(cd.HostNQN)
	if err != nil {
		s.log.Error("cannot set up authentication", "err", err)
		return status(nvme.StatusInternal | nvme.DNR)
	}
	if authReq != 0 {
		ctrl.awaitAuth(cc.QID)
	}
	if cc.QID == 0 {
		ctrl.startKeepAlive()
		s.log.Info("host connected", "host", cd.HostNQN, "kato", ctrl.kato, "authenticate", authReq != 0)
	}
	return completion{dw0: uint32(ctrl.id) | authReq}
}

// propertyGet reads a controller property; an 8-byte one fills both
// result dwords.
func propertyGet(_ context.Context, s *session, r *request) completion {
	var p nvme.PropertyCommand
	p.FromCommand(&r.sqe)
	c := s.ctrl
	var v uint64
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case p.Offset == nvme.PropCAP && p.Size8:
		v = nvme.CAP(s.srv.cfg.QueueDepth, 15)
	case p.Offset == nvme.PropVS && !p.Size8:
		v = uint64(targetVersion)
	case p.Offset == nvme.PropCC && !p.Size8:
		v = uint64(c.cc)
	case p.Offset == nvme.PropCSTS && !p.Size8:
		v = uint64(c.csts)
	default:
		return status(nvme.StatusInvalidField | nvme.DNR)
	}
	return completion{dw0: uint32(v), dw1: uint32(v >> 32)}
}

// propertySet writes a property: only CC is writable.
func propertySet(_ context.Context, s *session, r *request) completion {
	var p nvme.PropertyCommand
	p.FromCommand(&r.sqe)
	if p.Offset != nvme.PropCC || p.Size8 {
		return status(nvme.StatusInvalidField | nvme.DNR)
	}
	s.setCC(uint32(p.Value))
	return completion{}
}

// setCC applies a write of the Controller Configuration property: enabling
// checks the queue entry sizes and the command sets selected (CC.CSS,
// iocs.go) and sets CSTS.RDY; disabling resets the
// controller, closing its I/O queues; a shutdown notification flushes every
// namespace and reports shutdown complete.
func (s *session) setCC(v uint32) {
	c := s.ctrl
	c.mu.Lock()
	old := c.cc
	c.cc = v
	var closeQueues []qpair
	switch {
	case v&nvme.CCEnable != 0 && old&nvme.CCEnable == 0:
		iosqes, iocqes := v>>16&0xf, v>>20&0xf
		css, mps := nvme.CCCSS(v), v>>7&0xf
		if !cssSupported(css) || mps != 0 || (!c.discovery && (iosqes != 6 || iocqes != 4)) {
			c.csts |= nvme.CSTSFatal
		} else {
			c.csts = nvme.CSTSReady
			c.kvEnabled.Store(css == nvme.CCCSSAllIOCS)
		}
	case v&nvme.CCEnable == 0 && old&nvme.CCEnable != 0:
		c.csts = 0
		c.kvEnabled.Store(false)
		for qid, o := range c.queues {
			if qid != 0 {
				closeQueues = append(closeQueues, o)
			}
		}
	}
	shn := v&nvme.CCShnMask != 0
	c.mu.Unlock()
	for _, o := range closeQueues {
		o.close()
	}
	if shn && old&nvme.CCShnMask == 0 {
		if err := c.ss.flushAll(); err != nil {
			s.log.Error("flush on shutdown notification failed", "err", err)
		}
		c.mu.Lock()
		c.csts = c.csts&^nvme.CSTSShstMask | nvme.CSTSShstComplete
		c.mu.Unlock()
	} else if !shn {
		c.mu.Lock()
		c.csts &^= nvme.CSTSShstMask
		c.mu.Unlock()
	}
}

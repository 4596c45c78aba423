package target

import (
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
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

// connect runs a Fabrics Connect: queue 0 creates a controller, any other
// queue joins the controller named in the data.
func (q *queue) connect(cmd *command) {
	var cc nvme.ConnectCommand
	cc.FromCommand(&cmd.sqe)
	var cd nvme.ConnectData
	if err := cd.Unmarshal(cmd.data); err != nil {
		q.complete(cmd, nvme.StatusSGLDataLenInvalid|nvme.DNR, 0)
		return
	}
	bad := func(inData bool, off uint16) {
		q.complete(cmd, nvme.StatusConnectInvalidParameters|nvme.DNR, connectInvalid(inData, off))
	}
	if cc.RecFmt != 0 {
		q.complete(cmd, nvme.StatusConnectIncompatibleFormat|nvme.DNR, 0)
		return
	}
	ss := q.srv.subsys[cd.SubNQN]
	if cd.SubNQN == nvme.DiscoveryNQN {
		ss = q.srv.disc
	}
	if ss == nil {
		q.log.Info("connect to unknown subsystem", "nqn", cd.SubNQN, "host", cd.HostNQN)
		bad(true, 256)
		return
	}
	depth := int(cc.SQSize) + 1
	if cc.SQSize == 0 || depth > q.srv.cfg.QueueDepth {
		bad(false, 44)
		return
	}
	var ctrl *controller
	if cc.QID == 0 {
		if cd.CNTLID != 0xFFFF {
			bad(true, 16)
			return
		}
		kato := time.Duration(cc.KATO) * time.Millisecond
		var err error
		ctrl, err = ss.newController(cd.HostNQN, cd.HostID, kato, ss == q.srv.disc)
		if err != nil {
			q.complete(cmd, nvme.StatusConnectControllerBusy|nvme.DNR, 0)
			return
		}
		_ = ctrl.attach(0, q)
	} else {
		ctrl = ss.controller(cd.CNTLID)
		if ctrl == nil || ctrl.discovery {
			bad(true, 16)
			return
		}
		if ctrl.hostNQN != cd.HostNQN {
			bad(true, 512)
			return
		}
		ctrl.mu.Lock()
		ready, nq := ctrl.csts&nvme.CSTSReady != 0, ctrl.ioQueues
		ctrl.mu.Unlock()
		if !ready {
			q.complete(cmd, nvme.StatusCommandSequence|nvme.DNR, 0)
			return
		}
		if int(cc.QID) > nq {
			bad(false, 42)
			return
		}
		if err := ctrl.attach(cc.QID, q); err != nil {
			bad(false, 42)
			return
		}
		q.f.MaxCapsuleData = q.srv.cfg.InCapsuleData
	}
	q.ctrl, q.ss, q.qid, q.depth = ctrl, ss, cc.QID, depth
	q.discovery = ctrl.discovery
	q.noSQFlow = cc.CAttr&(1<<2) != 0
	q.maxXfer = 4096 << q.srv.cfg.MDTS
	q.log = q.log.With("subsystem", ss.nqn, "cntlid", ctrl.id, "qid", cc.QID)
	_ = q.conn.SetReadDeadline(time.Time{})
	if cc.QID == 0 {
		ctrl.startKeepAlive()
		q.log.Info("host connected", "host", cd.HostNQN, "kato", ctrl.kato)
	}
	q.complete(cmd, nvme.StatusSuccess, uint32(ctrl.id))
}

// fabrics runs Property Get/Set on a connected queue.
func (q *queue) fabrics(cmd *command) {
	var p nvme.PropertyCommand
	p.FromCommand(&cmd.sqe)
	c := q.ctrl
	switch cmd.sqe.FabricsType() {
	case nvme.FabricsPropertyGet:
		var v uint64
		c.mu.Lock()
		switch {
		case p.Offset == nvme.PropCAP && p.Size8:
			v = nvme.CAP(q.srv.cfg.QueueDepth, 15)
		case p.Offset == nvme.PropVS && !p.Size8:
			v = uint64(targetVersion)
		case p.Offset == nvme.PropCC && !p.Size8:
			v = uint64(c.cc)
		case p.Offset == nvme.PropCSTS && !p.Size8:
			v = uint64(c.csts)
		default:
			c.mu.Unlock()
			q.complete(cmd, nvme.StatusInvalidField|nvme.DNR, 0)
			return
		}
		c.mu.Unlock()
		cqeDW0, cqeDW1 := uint32(v), uint32(v>>32)
		q.completeDW(cmd, nvme.StatusSuccess, cqeDW0, cqeDW1)
	case nvme.FabricsPropertySet:
		if p.Offset != nvme.PropCC || p.Size8 {
			q.complete(cmd, nvme.StatusInvalidField|nvme.DNR, 0)
			return
		}
		q.setCC(uint32(p.Value))
		q.complete(cmd, nvme.StatusSuccess, 0)
	case nvme.FabricsConnect:
		q.complete(cmd, nvme.StatusCommandSequence|nvme.DNR, 0)
	default:
		q.complete(cmd, nvme.StatusInvalidOpcode|nvme.DNR, 0)
	}
}

// setCC applies a write of the Controller Configuration property: enabling
// checks the queue entry sizes and sets CSTS.RDY; disabling resets the
// controller, closing its I/O queues; a shutdown notification flushes every
// namespace and reports shutdown complete.
func (q *queue) setCC(v uint32) {
	c := q.ctrl
	c.mu.Lock()
	old := c.cc
	c.cc = v
	var closeQueues []*queue
	switch {
	case v&nvme.CCEnable != 0 && old&nvme.CCEnable == 0:
		iosqes, iocqes := v>>16&0xf, v>>20&0xf
		css, mps := v>>4&7, v>>7&0xf
		if css != 0 || mps != 0 || (!c.discovery && (iosqes != 6 || iocqes != 4)) {
			c.csts |= nvme.CSTSFatal
		} else {
			c.csts = nvme.CSTSReady
		}
	case v&nvme.CCEnable == 0 && old&nvme.CCEnable != 0:
		c.csts = 0
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
			q.log.Error("flush on shutdown notification failed", "err", err)
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

// completeDW completes with both result dwords (Property Get of an 8-byte
// property).
func (q *queue) completeDW(cmd *command, st nvme.Status, dw0, dw1 uint32) {
	q.mu.Lock()
	if q.cmds[cmd.sqe.CID] == cmd {
		delete(q.cmds, cmd.sqe.CID)
	}
	q.mu.Unlock()
	cqe := nvme.Completion{DW0: dw0, DW1: dw1, SQHead: uint16(q.sqhd.Load()), SQID: q.qid, CID: cmd.sqe.CID, Status: st}
	if err := q.w.Do(func(f *tcp.Framer) error { return f.WriteCapsuleResp(&cqe) }); err != nil {
		q.close()
	}
}

package target

import (
	"github.com/nearstore/nearstore/nvme"
)

// I/O command sets (NVMe Base 2.0; nvme/iocs.go). The controller offers
// two, the NVM command set (CSI 00h) and the Key Value command set (CSI
// 01h, cmds_kv.go), in one combination (I/O Command Set Combination Index
// 0, the only one of Identify CNS 1Ch), and says so in CAP.CSS (bits 0 and
// 6). What the host writes to CC.CSS when it enables the controller
// decides what its I/O queues may do:
//
//   - 000b (NVM only: a host that knows one command set): NVM namespaces
//     run the NVM commands; a KV namespace has no I/O command (Invalid
//     Opcode), and its CSI in the descriptor list tells the host to leave
//     it alone. The KV page of the Commands Supported and Effects log
//     lists no I/O command.
//   - 110b (every I/O command set of the selected combination): a KV
//     namespace also runs the KV commands.
//   - anything else fails the enable (CSTS.CFS), as an unsupported
//     configuration.
//
// The Identify structures of the command sets: CNS 05h (the set's own
// namespace structure, for the CSI in CDW11), 06h (the set's controller
// structure), 07h (the active NSIDs of a set), 08h (the generic facts of
// a namespace of any set, which Linux reads for a namespace whose command
// set it does not know before it makes a character device for it) and
// 1Ch (the combinations). CNS 00h is the NVM command set's structure; for
// a KV namespace it is refused with Invalid I/O Command Set.

// kvCombination is the one I/O command set combination the controller
// offers: NVM and Key Value.
const kvCombination = nvme.IOCSVector(1<<nvme.CSINVM | 1<<nvme.CSIKV)

// cssSupported reports whether the controller can be enabled with CC.CSS
// set to css.
func cssSupported(css uint8) bool {
	return css == nvme.CCCSSNVM || css == nvme.CCCSSAllIOCS
}

// csiSupported reports whether csi names one of the controller's command
// sets.
func csiSupported(csi uint8) bool { return kvCombination.Has(csi) }

// identifyCSNamespace answers Identify CNS 05h: the namespace's structure
// of command set csi. An inactive NSID reads as zeroes; a namespace of
// another set is refused. The NVM command set's structure (protection
// information, extended LBA formats) is all zeroes here: no end-to-end
// protection, no storage tags.
func identifyCSNamespace(s *session, r *request, csi uint8) completion {
	nsid := r.sqe.NSID
	switch {
	case !csiSupported(csi):
		return status(nvme.StatusInvalidField | nvme.DNR)
	case nsid == 0 || nsid == 0xFFFFFFFF:
		return status(nvme.StatusInvalidNamespace | nvme.DNR)
	}
	ns := s.ss.namespace(nsid)
	switch {
	case ns == nil:
		return dataCompletion(r, make([]byte, nvme.IdentifySize))
	case ns.csi() != csi:
		return status(nvme.StatusInvalidIOCS | nvme.DNR)
	case csi == nvme.CSIKV:
		return dataCompletion(r, identifyKV(ns))
	}
	return dataCompletion(r, make([]byte, nvme.IdentifySize))
}

// identifyCSController answers Identify CNS 06h. Neither command set has
// a controller limit to report: the NVM one's (Verify, Write Zeroes and
// Dataset Management size limits) are zero, no limit, and the KV command
// set defines no field of its own.
func identifyCSController(r *request, csi uint8) completion {
	if !csiSupported(csi) {
		return status(nvme.StatusInvalidField | nvme.DNR)
	}
	return dataCompletion(r, make([]byte, nvme.IdentifySize))
}

// identifyActiveNSList answers CNS 02h (every active NSID) and, with
// perSet, CNS 07h (those of command set csi): up to 1024 NSIDs above the
// command's, ascending.
func identifyActiveNSList(s *session, r *request, perSet bool, csi uint8) completion {
	if perSet && !csiSupported(csi) {
		return status(nvme.StatusInvalidField | nvme.DNR)
	}
	list := make([]byte, nvme.IdentifySize)
	i := 0
	for _, id := range s.ss.nsids() {
		if id <= r.sqe.NSID || i == nvme.IdentifySize/4 {
			continue
		}
		if perSet {
			if ns := s.ss.namespace(id); ns == nil || ns.csi() != csi {
				continue
			}
		}
		le32(list[4*i:], id)
		i++
	}
	return dataCompletion(r, list)
}

// identifyIndependent answers CNS 08h for a namespace of either set: it
// may be shared (as every namespace here), its reservation capabilities
// (the KV command table has no reservation commands) and that it is ready.
func identifyIndependent(s *session, r *request) completion {
	nsid := r.sqe.NSID
	if nsid == 0 || nsid == 0xFFFFFFFF {
		return status(nvme.StatusInvalidNamespace | nvme.DNR)
	}
	ns := s.ss.namespace(nsid)
	if ns == nil {
		return dataCompletion(r, make([]byte, nvme.IdentifySize))
	}
	id := nvme.IdentifyNamespaceIndependent{NMIC: 1, NSTAT: nvme.NSTATReady}
	if ns.kv == nil {
		id.RESCAP = nvmRescap
	}
	return dataCompletion(r, id.Marshal())
}

// identifyIOCS answers CNS 1Ch: the command set combinations, of which
// there is one (index 0).
func identifyIOCS(r *request) completion {
	return dataCompletion(r, nvme.MarshalIOCSVectors([]nvme.IOCSVector{kvCombination}))
}

// effectsLog builds the Commands Supported and Effects log of command set
// csi from the command tables: every admin command, and the I/O commands
// of csi if the controller runs them now (CC.CSS), each supported, and
// marked as changing user data if it may.
func (s *session) effectsLog(csi uint8) ([]byte, nvme.Status) {
	if !csiSupported(csi) {
		return nil, nvme.StatusInvalidField | nvme.DNR
	}
	cs := &s.srv.cmds
	var l nvme.CommandEffectsLog
	fill := func(dst *[256]uint32, t *cmdTable) {
		for op, spec := range t {
			if spec == nil {
				continue
			}
			dst[op] = nvme.EffectCSUPP
			if spec.changesData {
				dst[op] |= nvme.EffectLBCC
			}
		}
	}
	fill(&l.ACS, cs.admin)
	switch {
	case csi == nvme.CSINVM:
		fill(&l.IOCS, cs.io)
	case csi == nvme.CSIKV && s.ctrl.kvEnabled.Load():
		fill(&l.IOCS, cs.kv)
	}
	return l.Marshal(), 0
}

// ioCSProfile checks a Set Features I/O Command Set Profile: only the one
// combination, index 0, is offered.
func ioCSProfile(cdw11 uint32) completion {
	if cdw11&0x1FF != 0 {
		return status(nvme.StatusIOCSCombinationRejected | nvme.DNR)
	}
	return completion{}
}

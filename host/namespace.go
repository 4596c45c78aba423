package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	"github.com/nearstore/nearstore/nvme"
)

// nsInfo is what one scan learned about a namespace.
type nsInfo struct {
	nsid   uint32
	id     nvme.IdentifyNamespace
	blocks uint64
	bs     int
	nguid  [16]byte
	uuid   [16]byte
	csi    uint8                     // command set (NS descriptor 04h); 0 is NVM
	kv     *nvme.IdentifyNamespaceKV // a KV namespace's Identify (csi 01h)
}

// nsState is shared by every handle of one NSID and updated on each
// re-association, so handles stay valid across reconnects.
type nsState struct {
	nsid   uint32
	info   atomic.Pointer[nsInfo]
	active atomic.Bool
	// replaced is set, for good, when the NSID came to name another
	// namespace (ErrNamespaceChanged); the handles holding this state
	// then refuse every command.
	replaced atomic.Pointer[error]
	kvFlow   kvFlow // KV commands' flow control (kv.go)
}

// usable returns why commands may not be sent through the handles of st
// (nil: they may).
func (st *nsState) usable() error {
	if e := st.replaced.Load(); e != nil {
		return *e
	}
	return nil
}

// sameNamespace says whether a rescan's b is the namespace a was, as far
// as its handles can tell: the same identifiers and block size. (Its size
// may change: a namespace can be grown in place.)
func sameNamespace(a, b *nsInfo) error {
	switch {
	case a.nguid != b.nguid:
		return fmt.Errorf("NGUID %x is now %x", a.nguid, b.nguid)
	case a.uuid != b.uuid:
		return fmt.Errorf("UUID %x is now %x", a.uuid, b.uuid)
	case a.bs != b.bs:
		return fmt.Errorf("block size %d is now %d", a.bs, b.bs)
	}
	return nil
}

// Namespace is a handle to one namespace of a Controller. It stays valid
// across reconnections (it is keyed by NSID). It is an io.ReaderAt and
// io.WriterAt, and offers an asynchronous API (Go) for many commands in
// flight. All methods are safe for concurrent use.
type Namespace struct {
	c   *Controller
	st  *nsState
	pin int // I/O queue index, or -1 for round-robin
}

// scanNamespaces lists the active namespaces (Identify CNS 02h) and
// identifies each (CNS 00h, and 03h for its identifiers).
func (a *association) scanNamespaces(ctx context.Context) ([]nsInfo, error) {
	var ids []uint32
	buf := make([]byte, nvme.IdentifySize)
	for start := uint32(0); ; {
		if err := a.identify(ctx, nvme.CNSActiveNSList, start, buf); err != nil {
			return nil, err
		}
		n := 0
		for off := 0; off < len(buf); off += 4 {
			id := binary.LittleEndian.Uint32(buf[off:])
			if id == 0 {
				break
			}
			if id <= start || (len(ids) > 0 && id <= ids[len(ids)-1]) {
				return nil, fmt.Errorf("host: active namespace list not ascending at NSID %d", id)
			}
			ids = append(ids, id)
			n++
		}
		if n < len(buf)/4 || ids[len(ids)-1] >= 0xfffffffe {
			break
		}
		start = ids[len(ids)-1]
	}
	infos := make([]nsInfo, 0, len(ids))
	for _, nsid := range ids {
		// The descriptors first: their command set says what Identify
		// Namespace returns. The list is optional before NVMe 1.3; carry
		// on without.
		var ds []nvme.NSDescriptor
		clear(buf)
		if err := a.identify(ctx, nvme.CNSNSDescriptors, nsid, buf); err == nil {
			ds, _ = nvme.UnmarshalNSDescriptors(buf)
		} else if ctx.Err() != nil || !isStatus(err) {
			return nil, err
		}
		var inf nsInfo
		inf.nsid = nsid
		for _, d := range ds {
			if d.Type == nvme.NIDTCSI && len(d.ID) == 1 {
				inf.csi = d.ID[0]
			}
		}
		if inf.csi != nvme.CSINVM && (inf.csi != nvme.CSIKV || nvme.CCCSS(a.cc) != nvme.CCCSSAllIOCS) {
			continue // a command set this host does not speak, or did not enable
		}
		// CNS 00h is the NVM command set's structure; another set's is
		// CNS 05h with its CSI.
		cns := uint8(nvme.CNSNamespace)
		if inf.csi != nvme.CSINVM {
			cns = nvme.CNSCSNamespace
		}
		if err := a.identifyCSI(ctx, cns, inf.csi, nsid, buf); err != nil {
			return nil, err
		}
		if inf.csi == nvme.CSIKV {
			kv, err := nvme.UnmarshalIdentifyNamespaceKV(buf)
			if err != nil {
				return nil, fmt.Errorf("host: nsid %d: %w", nsid, err)
			}
			if kv.NSZE == 0 {
				continue
			}
			// No blocks a host could read or write: block commands fail
			// as out of range rather than divide by a zero block size.
			inf.kv, inf.nguid, inf.bs = &kv, kv.NGUID, 512
		} else {
			if err := inf.id.Unmarshal(buf); err != nil {
				return nil, fmt.Errorf("host: nsid %d: %w", nsid, err)
			}
			if inf.id.NSZE == 0 {
				continue // allocated but not active
			}
			inf.blocks, inf.bs, inf.nguid = inf.id.NSZE, inf.id.BlockSize(), inf.id.NGUID
		}
		for _, d := range ds {
			switch {
			case d.Type == nvme.NIDTNGUID && len(d.ID) == 16:
				copy(inf.nguid[:], d.ID)
			case d.Type == nvme.NIDTUUID && len(d.ID) == 16:
				copy(inf.uuid[:], d.ID)
			}
		}
		infos = append(infos, inf)
	}
	return infos, nil
}

func isStatus(err error) bool {
	var se *nvme.StatusError
	return errors.As(err, &se)
}

// updateNamespaces installs a scan's result, keeping existing handles of
// namespaces that are still the same ones; an NSID that names another
// namespace now gets a new state, and the old handles refuse commands.
// It runs before a new association is published, so no command reaches
// the new association through a handle of a namespace it no longer has.
func (c *Controller) updateNamespaces(infos []nsInfo) {
	c.nsMu.Lock()
	defer c.nsMu.Unlock()
	for _, ns := range c.ns {
		ns.st.active.Store(false)
	}
	c.activeNS = c.activeNS[:0]
	for i := range infos {
		inf := &infos[i]
		ns := c.ns[inf.nsid]
		if ns != nil {
			if old := ns.st.info.Load(); old != nil {
				if why := sameNamespace(old, inf); why != nil {
					err := fmt.Errorf("%w: nsid %d of %s at %s: %w; the handle is no longer usable (Controller.Namespace gives the new namespace's)",
						ErrNamespaceChanged, inf.nsid, c.subnqn, c.addr, why)
					ns.st.replaced.Store(&err)
					ns.st.active.Store(false)
					c.log.Error("host: namespace changed identity; refusing its old handles' commands", "nsid", inf.nsid, "why", why)
					ns = nil
				}
			}
		}
		if ns == nil {
			ns = &Namespace{c: c, st: &nsState{nsid: inf.nsid}, pin: -1}
			c.ns[inf.nsid] = ns
		}
		ns.st.info.Store(inf)
		ns.st.active.Store(true)
		c.activeNS = append(c.activeNS, inf.nsid)
	}
	slices.Sort(c.activeNS)
}

// Namespaces returns the active namespaces, by ascending NSID.
func (c *Controller) Namespaces() []*Namespace {
	c.nsMu.Lock()
	defer c.nsMu.Unlock()
	out := make([]*Namespace, 0, len(c.activeNS))
	for _, id := range c.activeNS {
		out = append(out, c.ns[id])
	}
	return out
}

// Namespace returns the handle of active namespace nsid.
func (c *Controller) Namespace(nsid uint32) (*Namespace, error) {
	c.nsMu.Lock()
	defer c.nsMu.Unlock()
	ns := c.ns[nsid]
	if ns == nil || !ns.st.active.Load() {
		return nil, fmt.Errorf("host: namespace %d is not active on %s: %w", nsid, c.subnqn,
			&nvme.StatusError{Status: nvme.StatusInvalidNamespace, Opcode: nvme.AdminIdentify})
	}
	return ns, nil
}

// ID returns the namespace identifier.
func (ns *Namespace) ID() uint32 { return ns.st.nsid }

func (ns *Namespace) info() *nsInfo { return ns.st.info.Load() }

// Size returns the namespace size in bytes.
func (ns *Namespace) Size() int64 { i := ns.info(); return int64(i.blocks) * int64(i.bs) }

// Blocks returns the namespace size in logical blocks.
func (ns *Namespace) Blocks() uint64 { return ns.info().blocks }

// BlockSize returns the logical block size in bytes.
func (ns *Namespace) BlockSize() int { return ns.info().bs }

// NGUID returns the namespace globally unique identifier (zero if none).
func (ns *Namespace) NGUID() [16]byte { return ns.info().nguid }

// UUID returns the namespace UUID (zero if the controller reports none).
func (ns *Namespace) UUID() [16]byte { return ns.info().uuid }

// IdentifyData returns the namespace's Identify Namespace data.
func (ns *Namespace) IdentifyData() nvme.IdentifyNamespace { return ns.info().id }

// Queue returns a handle to the same namespace whose commands all go to I/O
// queue i (modulo the number of queues), e.g. to keep one goroutine's
// commands ordered on one connection.
func (ns *Namespace) Queue(i int) *Namespace {
	return &Namespace{c: ns.c, st: ns.st, pin: max(i, 0)}
}

// Go submits an I/O command for this namespace (it sets NSID) and returns
// at once; the Call is sent on done when it completes. done may be nil (a
// channel is made) and must otherwise be buffered, with room for every call
// that may be outstanding on it: like net/rpc, a full channel drops the
// Call (counted in Stats.DroppedDone) rather than stall the connection.
// Go blocks only while the queue has no free slot or the controller is
// reconnecting; ctx ends that wait, and ctx ending while the command is in
// flight completes the Call with ctx.Err() (its slot stays taken until the
// controller answers). To submit several commands at once, see Batch.
func (ns *Namespace) Go(ctx context.Context, cmd *nvme.Command, out, in []byte, done chan *Call) *Call {
	call := &Call{Cmd: *cmd, Out: out, In: in, Done: done, ns: ns.st}
	call.Cmd.NSID = ns.st.nsid
	return ns.c.goCall(ctx, call, ns.pin)
}

// Batch gathers I/O commands to submit together: Submit sends them all
// with one write to the connection, where Go costs one write each (unless
// it finds another goroutine writing the queue, which then writes it with
// whatever else was framed meanwhile: tcp.Writer). It is the
// host's counterpart of the Linux block layer's plug, for a submitter that
// has several commands ready at once, such as an event loop resubmitting
// after a burst of completions.
//
// All the commands of one Submit go to one I/O queue: the one the
// Namespace handle is pinned to (see Queue), otherwise the next one
// round-robin. A Batch is for one goroutine at a time; it is empty again
// after Submit and may be reused.
type Batch struct {
	// OnDone, when set, becomes the OnDone of every Call the batch adds
	// (see Call.OnDone): they are delivered to it, not on a channel.
	OnDone func(*Call)

	ns    *Namespace
	calls []*Call
}

// NewBatch returns an empty batch of commands for ns.
func (ns *Namespace) NewBatch() *Batch { return &Batch{ns: ns} }

// Go adds an I/O command for the batch's namespace; nothing is sent before
// Submit. The Call is delivered to the batch's OnDone if it has one (done
// is then ignored), otherwise on done as for Namespace.Go: done may be nil
// (a channel is made) and must otherwise be buffered, with room for every
// call that may be outstanding on it.
func (b *Batch) Go(cmd *nvme.Command, out, in []byte, done chan *Call) *Call {
	switch {
	case b.OnDone != nil:
	case done == nil:
		done = make(chan *Call, 1)
	case cap(done) == 0:
		panic("host: done channel is unbuffered")
	}
	call := &Call{Cmd: *cmd, Out: out, In: in, Done: done, OnDone: b.OnDone, ns: b.ns.st}
	call.Cmd.NSID = b.ns.st.nsid
	b.calls = append(b.calls, call)
	return call
}

// ReadBlocks adds a read of len(buf)/BlockSize() blocks at lba into buf;
// see Namespace.ReadBlocks. A request that fails the namespace's checks is
// not added: its Call is delivered (on done, or to OnDone) at once.
func (b *Batch) ReadBlocks(buf []byte, lba uint64, done chan *Call) *Call {
	return b.rw(nvme.IORead, buf, lba, done)
}

// WriteBlocks adds a write of buf to len(buf)/BlockSize() blocks at lba;
// see ReadBlocks.
func (b *Batch) WriteBlocks(buf []byte, lba uint64, done chan *Call) *Call {
	return b.rw(nvme.IOWrite, buf, lba, done)
}

func (b *Batch) rw(opc uint8, buf []byte, lba uint64, done chan *Call) *Call {
	cmd, out, in, err := b.ns.rwCommand(opc, buf, lba)
	if err != nil {
		return failedCall(cmd, err, done, b.OnDone)
	}
	return b.Go(&cmd, out, in, done)
}

// Len returns the number of commands waiting for Submit.
func (b *Batch) Len() int { return len(b.calls) }

// Submit sends the batch's commands and empties the batch. ctx does for
// each of them what it does for Namespace.Go: it ends the wait for a free
// slot or a reconnection, and its ending while a command is in flight
// completes the Call with ctx.Err(). Every Call is delivered on its done
// channel, with an error if it could not be submitted. Submit returns once
// every command is written to the connection; it blocks only as Go does.
func (b *Batch) Submit(ctx context.Context) {
	calls := b.calls
	b.calls = b.calls[:0]
	b.ns.c.submitBatch(ctx, calls, b.ns.pin)
	clear(calls) // let the Calls go; the slice is reused
}

// IO runs an I/O command synchronously; see Go.
func (ns *Namespace) IO(ctx context.Context, cmd *nvme.Command, out, in []byte) (nvme.Completion, error) {
	call := ns.Go(ctx, cmd, out, in, make(chan *Call, 1))
	<-call.Done
	return call.Completion, call.Err
}

// checkBlocks validates a block-granular transfer of n bytes at lba.
func (ns *Namespace) checkBlocks(n int, lba uint64) (uint32, error) {
	inf := ns.info()
	if n == 0 || n%inf.bs != 0 {
		return 0, fmt.Errorf("host: nsid %d: buffer of %d bytes is not a positive multiple of the block size %d", ns.st.nsid, n, inf.bs)
	}
	nlb := uint64(n / inf.bs)
	if nlb > 65536 {
		return 0, fmt.Errorf("host: nsid %d: %d blocks exceed the 65536 a command can move", ns.st.nsid, nlb)
	}
	if max := ns.c.MaxTransfer(); n > max {
		return 0, fmt.Errorf("host: nsid %d: a transfer of %d bytes exceeds the controller's largest (MDTS) of %d bytes", ns.st.nsid, n, max)
	}
	if lba >= inf.blocks || nlb > inf.blocks-lba {
		return 0, fmt.Errorf("host: nsid %d: blocks [%d, +%d) beyond the end (%d): %w", ns.st.nsid, lba, nlb, inf.blocks,
			&nvme.StatusError{Status: nvme.StatusLBAOutOfRange})
	}
	return uint32(nlb), nil
}

// failedCall delivers an error without submitting anything, to onDone if
// it is set, otherwise on done (made if nil).
func failedCall(cmd nvme.Command, err error, done chan *Call, onDone func(*Call)) *Call {
	if done == nil && onDone == nil {
		done = make(chan *Call, 1)
	}
	c := &Call{Cmd: cmd, Err: err, Done: done, OnDone: onDone}
	c.state.Store(1)
	c.deliver()
	return c
}

// ReadBlocks reads len(buf)/BlockSize() blocks at lba into buf (at most
// 65536 blocks and MaxTransfer bytes); see Go.
func (ns *Namespace) ReadBlocks(ctx context.Context, buf []byte, lba uint64, done chan *Call) *Call {
	return ns.rw(ctx, nvme.IORead, buf, lba, done)
}

// WriteBlocks writes buf to len(buf)/BlockSize() blocks at lba; see Go.
func (ns *Namespace) WriteBlocks(ctx context.Context, buf []byte, lba uint64, done chan *Call) *Call {
	return ns.rw(ctx, nvme.IOWrite, buf, lba, done)
}

func (ns *Namespace) rw(ctx context.Context, opc uint8, buf []byte, lba uint64, done chan *Call) *Call {
	cmd, out, in, err := ns.rwCommand(opc, buf, lba)
	if err != nil {
		return failedCall(cmd, err, done, nil)
	}
	return ns.Go(ctx, &cmd, out, in, done)
}

// rwCommand builds a read or write of buf at lba.
func (ns *Namespace) rwCommand(opc uint8, buf []byte, lba uint64) (cmd nvme.Command, out, in []byte, err error) {
	cmd = nvme.Command{Opcode: opc, NSID: ns.st.nsid}
	nlb, err := ns.checkBlocks(len(buf), lba)
	if err != nil {
		return cmd, nil, nil, err
	}
	cmd.SetLBA(lba, nlb)
	if opc == nvme.IORead {
		return cmd, nil, buf, nil
	}
	return cmd, buf, nil, nil
}

// seg is one command of a byte-granular transfer: either a slice of the
// caller's buffer, or a bounce block for an unaligned edge.
type seg struct {
	lba    uint64
	buf    []byte // the blocks on the wire
	bounce bool
	pOff   int // where the segment's bytes are in p
	bOff   int // where they are in buf (bounce only)
	n      int // bytes of p covered
}

// plan splits [off, off+len(p)) into commands of at most maxBlocks blocks,
// bouncing partial blocks at either edge.
func plan(p []byte, off int64, bs int, maxBlocks int) []seg {
	bs64 := int64(bs)
	end := off + int64(len(p))
	first, last := off/bs64, (end-1)/bs64
	headPart, tailPart := off%bs64 != 0, end%bs64 != 0
	if first == last && (headPart || tailPart) {
		return []seg{{lba: uint64(first), buf: make([]byte, bs), bounce: true, bOff: int(off % bs64), n: len(p)}}
	}
	var segs []seg
	pos := 0
	mid := first
	if headPart {
		h := bs - int(off%bs64)
		segs = append(segs, seg{lba: uint64(first), buf: make([]byte, bs), bounce: true, bOff: int(off % bs64), n: h})
		mid++
		pos = h
	}
	midEnd := last + 1
	if tailPart {
		midEnd = last
	}
	for lba := mid; lba < midEnd; {
		nb := min(midEnd-lba, int64(maxBlocks))
		n := int(nb) * bs
		segs = append(segs, seg{lba: uint64(lba), buf: p[pos : pos+n], pOff: pos, n: n})
		lba += nb
		pos += n
	}
	if tailPart {
		segs = append(segs, seg{lba: uint64(last), buf: make([]byte, bs), bounce: true, pOff: pos, n: int(end % bs64)})
	}
	return segs
}

// MaxTransfer is the most bytes one read or write command may move: the
// controller's MDTS, in whole blocks. ReadAt and WriteAt split larger
// transfers; ReadBlocks, WriteBlocks and batches refuse them.
func (ns *Namespace) MaxTransfer() int { return ns.maxBlocks() * ns.BlockSize() }

// maxBlocks is how many blocks one read or write may move.
func (ns *Namespace) maxBlocks() int {
	return max(1, min(ns.c.MaxTransfer()/ns.BlockSize(), 65536))
}

// run issues one command per segment concurrently and waits for all; it
// returns each segment's error.
func (ns *Namespace) run(ctx context.Context, opc uint8, segs []seg, only func(*seg) bool) []error {
	done := make(chan *Call, len(segs))
	idx := make(map[*Call]int, len(segs))
	n := 0
	for i := range segs {
		s := &segs[i]
		if only != nil && !only(s) {
			continue
		}
		idx[ns.rw(ctx, opc, s.buf, s.lba, done)] = i
		n++
	}
	errs := make([]error, len(segs))
	for range n {
		c := <-done
		errs[idx[c]] = c.Err
	}
	return errs
}

// ReadAt implements io.ReaderAt; see ReadAtContext.
func (ns *Namespace) ReadAt(p []byte, off int64) (int, error) {
	return ns.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext reads len(p) bytes at byte offset off. Any offset and
// length work: partial blocks at the edges are read whole into a bounce
// buffer. Large reads are split at the controller's maximum transfer size
// and issued concurrently. Reading past the end returns io.EOF with the
// bytes before it.
func (ns *Namespace) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("host: nsid %d: negative offset %d", ns.st.nsid, off)
	}
	size := ns.Size()
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	var eof error
	if int64(len(p)) > size-off {
		p, eof = p[:size-off], io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	segs := plan(p, off, ns.BlockSize(), ns.maxBlocks())
	errs := ns.run(ctx, nvme.IORead, segs, nil)
	n := 0
	for i := range segs {
		s := &segs[i]
		if errs[i] != nil {
			return n, errs[i]
		}
		if s.bounce {
			copy(p[s.pOff:s.pOff+s.n], s.buf[s.bOff:])
		}
		n += s.n
	}
	return n, eof
}

// WriteAt implements io.WriterAt; see WriteAtContext.
func (ns *Namespace) WriteAt(p []byte, off int64) (int, error) {
	return ns.WriteAtContext(context.Background(), p, off)
}

// WriteAtContext writes p at byte offset off. Partial blocks at the edges
// are read, modified and written back; that read-modify-write is not atomic
// against other writers of the same block, so concurrent unaligned writers
// sharing a block must serialize themselves. A write that does not fit in
// the namespace is refused whole.
func (ns *Namespace) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	size := ns.Size()
	if off < 0 || off > size || int64(len(p)) > size-off {
		return 0, fmt.Errorf("host: nsid %d: write [%d, +%d) outside the namespace (%d bytes): %w",
			ns.st.nsid, off, len(p), size, &nvme.StatusError{Status: nvme.StatusLBAOutOfRange, Opcode: nvme.IOWrite})
	}
	if len(p) == 0 {
		return 0, nil
	}
	segs := plan(p, off, ns.BlockSize(), ns.maxBlocks())
	isBounce := func(s *seg) bool { return s.bounce }
	for i, err := range ns.run(ctx, nvme.IORead, segs, isBounce) {
		if err != nil {
			return 0, err
		}
		if s := &segs[i]; s.bounce {
			copy(s.buf[s.bOff:], p[s.pOff:s.pOff+s.n])
		}
	}
	errs := ns.run(ctx, nvme.IOWrite, segs, nil)
	n := 0
	for i := range segs {
		if errs[i] != nil {
			return n, errs[i]
		}
		n += segs[i].n
	}
	return n, nil
}

// Flush commits the controller's volatile write cache for this namespace.
func (ns *Namespace) Flush(ctx context.Context) error {
	_, err := ns.IO(ctx, &nvme.Command{Opcode: nvme.IOFlush}, nil, nil)
	return err
}

// blockRange converts a block-aligned byte range to blocks.
func (ns *Namespace) blockRange(what string, off, n int64) (uint64, uint64, error) {
	inf := ns.info()
	bs := int64(inf.bs)
	if off < 0 || n <= 0 || off%bs != 0 || n%bs != 0 {
		return 0, 0, fmt.Errorf("host: nsid %d: %s [%d, +%d) is not a non-empty range aligned to %d-byte blocks", ns.st.nsid, what, off, n, bs)
	}
	lba, nlb := uint64(off/bs), uint64(n/bs)
	if lba >= inf.blocks || nlb > inf.blocks-lba {
		return 0, 0, fmt.Errorf("host: nsid %d: %s [%d, +%d) beyond the end: %w", ns.st.nsid, what, off, n,
			&nvme.StatusError{Status: nvme.StatusLBAOutOfRange})
	}
	return lba, nlb, nil
}

// waitAll waits for n calls on done and returns the first error.
func waitAll(done chan *Call, n int) error {
	var first error
	for range n {
		if c := <-done; c.Err != nil && first == nil {
			first = c.Err
		}
	}
	return first
}

// WriteZeroes zeroes n bytes at off, both multiples of the block size, in
// commands of at most 65536 blocks issued concurrently. When the controller
// does not offer Write Zeroes (ONCS), or refuses it as unsupported — the
// Linux target does on file systems without FALLOC_FL_ZERO_RANGE — it writes
// zeroes instead, as the Linux block layer's blkdev_issue_zeroout does.
func (ns *Namespace) WriteZeroes(ctx context.Context, off, n int64) error {
	lba, nlb, err := ns.blockRange("write zeroes", off, n)
	if err != nil {
		return err
	}
	if ns.c.Identify().ONCS&nvme.ONCSWriteZeroes == 0 {
		return ns.writeZeroBuffers(ctx, off, n)
	}
	cmds := int((nlb + 65535) / 65536)
	done := make(chan *Call, cmds)
	for left := nlb; left > 0; {
		k := min(left, 65536)
		cmd := nvme.Command{Opcode: nvme.IOWriteZeroes}
		cmd.SetLBA(lba, uint32(k))
		ns.Go(ctx, &cmd, nil, nil, done)
		lba += k
		left -= k
	}
	err = waitAll(done, cmds)
	var se *nvme.StatusError
	if errors.As(err, &se) {
		switch se.Status.Code() {
		case nvme.StatusInvalidOpcode, nvme.StatusONCSNotSupported, nvme.StatusInvalidField:
			return ns.writeZeroBuffers(ctx, off, n)
		}
	}
	return err
}

// writeZeroBuffers zeroes a range with ordinary writes.
func (ns *Namespace) writeZeroBuffers(ctx context.Context, off, n int64) error {
	z := make([]byte, min(n, int64(ns.c.MaxTransfer())))
	for n > 0 {
		k := min(n, int64(len(z)))
		if _, err := ns.WriteAtContext(ctx, z[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

// DeallocatedReadsZero reports whether the namespace promises that
// deallocated blocks read as zeroes (DLFEAT bits 2:0 = 001b). Without that
// promise a deallocated block may read as anything.
func (ns *Namespace) DeallocatedReadsZero() bool { return ns.IdentifyData().DLFEAT&7 == 1 }

// dsmRangesPerCmd is the most ranges one Dataset Management command takes.
const dsmRangesPerCmd = 256

// Deallocate deallocates (trims) n bytes at off, both multiples of the
// block size, with Dataset Management commands (AD bit) of up to 256 ranges.
func (ns *Namespace) Deallocate(ctx context.Context, off, n int64) error {
	lba, nlb, err := ns.blockRange("deallocate", off, n)
	if err != nil {
		return err
	}
	// Each range is 16 bytes: context attributes (4), NLB (4, a count, not
	// zero-based), SLBA (8).
	const maxRange = 0xffffffff
	var ranges [][16]byte
	for left := nlb; left > 0; {
		k := min(left, maxRange)
		var r [16]byte
		binary.LittleEndian.PutUint32(r[4:], uint32(k))
		binary.LittleEndian.PutUint64(r[8:], lba)
		ranges = append(ranges, r)
		lba += k
		left -= k
	}
	cmds := (len(ranges) + dsmRangesPerCmd - 1) / dsmRangesPerCmd
	done := make(chan *Call, cmds)
	for len(ranges) > 0 {
		k := min(len(ranges), dsmRangesPerCmd)
		data := make([]byte, 0, 16*k)
		for _, r := range ranges[:k] {
			data = append(data, r[:]...)
		}
		cmd := nvme.Command{Opcode: nvme.IODSM, CDW10: uint32(k - 1), CDW11: 1 << 2}
		ns.Go(ctx, &cmd, data, nil, done)
		ranges = ranges[k:]
	}
	return waitAll(done, cmds)
}

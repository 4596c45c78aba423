package chain

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain/chainpb"
)

// NodeConfig configures a node.
type NodeConfig struct {
	ID, Group string
	// Addr is the address clients and peers dial (host:port of the
	// listener given to Run).
	Addr    string
	Store   Store
	Control *cluster.Control
	// LeaseTTL is the node's etcd lease in seconds (default 2): a node
	// that stops renewing it is taken out of the chain this long after.
	LeaseTTL int
	// ReadIOPS, if > 0, models the node's device: store reads are
	// admitted at most this many per second (as volume's simulated SSDs
	// admit commands), so a benchmark can show a replica's read capacity
	// as the bound it is on real hardware. 0: reads run unthrottled.
	ReadIOPS float64
	// CopyChunk is the number of KVs per COPY message (default 256).
	CopyChunk int
	// ShipWindow is how many Ship messages of writes a node has
	// uncommitted at a time (default 1): the writes applied while the
	// window is full go together in the next message (group commit), so
	// a smaller window sends fewer, larger messages and a Put waits up
	// to one more commit round trip before it is shipped.
	ShipWindow int
	Log        *slog.Logger
}

type entry struct {
	seq uint64
	op  Op
}

type note struct {
	version uint64
	body    []byte
}

// commitWait is a Put waiting for write seq to be committed: ch is
// closed once it is (or once committed passes seq for another reason,
// as the broadcast of changed would have woken it).
type commitWait struct {
	seq uint64
	ch  chan struct{}
}

// Node is one replica of a group's chain: it serves Put at the head, Get
// at every member, and ships the writes it applied to its successor.
//
// State, guarded by mu (the rules the code keeps):
//   - applied == Store.Applied(); writes are applied in seq order.
//   - committed <= applied: every write up to committed is on every
//     member from this node to the tail; clients' Puts up to it are
//     answered.
//   - log holds every write with seq in (logBase, applied]; logBase <=
//     min(committed, succApplied), so any write the successor may lack
//     can be shipped again, and a new successor after a reconfiguration
//     gets everything past the committed point.
//   - dirty[k] is the highest seq of a write to k that is not committed;
//     a key with no entry is clean, and a clean key's local value is the
//     committed one, which is what lets a non-tail replica serve it.
//   - waits holds the Puts waiting for their commit, in seq order, none
//     with seq <= committed: each is woken alone when the commit point
//     passes its write, so a head with many writes in flight does not
//     wake every one of them on every change (changed wakes the rest).
type Node struct {
	cfg NodeConfig
	log *slog.Logger

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every change
	chain       cluster.Chain
	applied     uint64
	committed   uint64
	logBase     uint64
	entries     []entry
	dirty       map[string]uint64
	waits       []commitWait
	succApplied uint64 // the successor's applied point (meaningful if hasSucc)
	hasSucc     bool
	copying     bool
	copies      uint64 // COPYs received; each is acked even if applied did not move
	// Join gating (this node is the tail and a node is joining): once the
	// joiner has caught up with the COPY, commits wait for it too
	// (gateFrom is the committed point when they started to), and when it
	// holds everything up to gateFrom it is promoted.
	joiner    string
	joinerAck uint64
	gating    bool
	gateFrom  uint64
	promoting bool
	// notes are the newest store note of every origin heard of (this
	// node's own store included), to send up on acks (Noter).
	notes map[string]note

	// shards is the shard map the node enforces (nil: the cluster has
	// none, and the group holds every key); it only moves to newer
	// versions. writes counts, per shard start (hex), the client writes
	// this node took as head: the measure of write imbalance.
	shards *cluster.ShardMap
	writes map[string]uint64

	shipCancel context.CancelFunc
	shipDone   chan struct{}
	// shipMsgs and shipWrites count the write messages this node's
	// shipper sent and the writes in them (ShipStats).
	shipMsgs, shipWrites atomic.Uint64

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn

	readMu   sync.Mutex
	nextRead time.Time

	chainpb.UnimplementedChainServer
}

// NewNode returns a node over cfg.Store; Run starts it.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.ID == "" || cfg.Group == "" || cfg.Store == nil || cfg.Control == nil {
		return nil, fmt.Errorf("chain: node needs an ID, a group, a store and a control plane")
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 2
	}
	if cfg.CopyChunk <= 0 {
		cfg.CopyChunk = 256
	}
	if cfg.ShipWindow <= 0 {
		cfg.ShipWindow = 1
	}
	lg := cfg.Log
	if lg == nil {
		lg = slog.Default()
	}
	a := cfg.Store.Applied()
	return &Node{
		cfg: cfg, log: lg.With("node", cfg.ID, "group", cfg.Group),
		changed: make(chan struct{}), applied: a, committed: a, logBase: a, succApplied: a,
		dirty: map[string]uint64{}, conns: map[string]*grpc.ClientConn{}, notes: map[string]note{}, writes: map[string]uint64{},
	}, nil
}

// notifyLocked wakes everyone waiting on a change.
func (n *Node) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// Run serves the node's group alone on ln until ctx ends: a Host of
// this one node (its ID, Addr, Control and LeaseTTL).
func (n *Node) Run(ctx context.Context, ln net.Listener) error {
	h, err := NewHost(HostConfig{ID: n.cfg.ID, Addr: n.cfg.Addr, Control: n.cfg.Control, LeaseTTL: n.cfg.LeaseTTL, Log: n.cfg.Log}, n)
	if err != nil {
		return err
	}
	return h.Run(ctx, ln)
}

// leave takes the node out of its group's chain, as each incarnation of
// its host does before registering: what it holds may be behind the
// chain, or hold writes the chain never committed (cluster.Remove keeps
// a last member).
func (n *Node) leave(ctx context.Context) error {
	if _, _, err := n.cfg.Control.Update(ctx, n.cfg.Group, func(c cluster.Chain) (cluster.Chain, bool, error) {
		next, ev := cluster.Remove(c, n.cfg.ID)
		return next, len(ev) > 0, nil
	}); err != nil && !errors.Is(err, cluster.ErrNoChain) {
		return err
	}
	return nil
}

// follow reconciles the group's chain and installs each configuration
// until ctx ends; it stops the shipper on the way out and then refuses
// everything until the next configuration.
func (n *Node) follow(ctx context.Context) {
	go func() {
		if err := n.cfg.Control.RunReconciler(ctx, n.cfg.Group, time.Second); err != nil && ctx.Err() == nil {
			n.log.Error("reconciler", "err", err)
		}
	}()
	watch := n.cfg.Control.WatchChain(ctx, n.cfg.Group)
	for c := range watch {
		n.setChain(ctx, c)
	}
	n.stopShipper()
	n.mu.Lock()
	n.chain = cluster.Chain{}
	if w, ok := n.cfg.Store.(ChainWatcher); ok {
		w.SetChain(n.chain, n.cfg.ID)
	}
	n.notifyLocked()
	n.mu.Unlock()
}

// setChain installs a new configuration: the commit point is recomputed
// for the node's new place, and the shipper restarts toward the (possibly
// new) successor, which then gets every write past its applied point.
func (n *Node) setChain(ctx context.Context, c cluster.Chain) {
	n.stopShipper()
	n.mu.Lock()
	n.chain = c
	_, succ, member := c.Neighbours(n.cfg.ID)
	n.joiner, n.joinerAck, n.gating, n.promoting = "", 0, false, false
	if member && succ != "" && succ == c.Joining {
		n.joiner = succ
	}
	n.succApplied, n.hasSucc = n.committed, member && succ != ""
	if w, ok := n.cfg.Store.(ChainWatcher); ok {
		w.SetChain(c, n.cfg.ID)
	}
	n.advanceLocked()
	n.log.Info("configuration", "epoch", c.Epoch, "members", c.Members, "joining", c.Joining, "successor", succ, "applied", n.applied, "committed", n.committed)
	n.notifyLocked()
	n.mu.Unlock()
	if member && succ != "" {
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		n.mu.Lock()
		n.shipCancel, n.shipDone = cancel, done
		n.mu.Unlock()
		go func() {
			defer close(done)
			n.shipLoop(sctx, c, succ)
		}()
	}
}

func (n *Node) stopShipper() {
	n.mu.Lock()
	cancel, done := n.shipCancel, n.shipDone
	n.shipCancel, n.shipDone = nil, nil
	n.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// isTailLocked: the node is the chain's last member.
func (n *Node) isTailLocked() bool { return n.chain.Tail() == n.cfg.ID }

// advanceLocked moves committed as far as the node's place allows:
// to applied at the tail (or to what the joiner holds while gating), and
// cleans the keys and truncates the log up to it.
func (n *Node) advanceLocked() {
	if n.isTailLocked() {
		c := n.applied
		if n.gating && n.joinerAck < c {
			c = max(n.joinerAck, n.committed)
		}
		n.setCommittedLocked(c)
	}
	n.truncateLocked()
}

func (n *Node) setCommittedLocked(c uint64) {
	c = min(c, n.applied)
	if c <= n.committed {
		return
	}
	// entries[i] is write logBase+1+i, and logBase <= committed.
	for _, e := range n.entries[min(n.committed-n.logBase, uint64(len(n.entries))):] {
		if e.seq > c {
			break
		}
		if k := string(e.op.Key); e.op.Record == nil && n.dirty[k] == e.seq {
			delete(n.dirty, k)
		}
	}
	n.committed = c
	n.releaseWaitsLocked()
}

// releaseWaitsLocked wakes the Puts whose writes are committed.
func (n *Node) releaseWaitsLocked() {
	i := 0
	for ; i < len(n.waits) && n.waits[i].seq <= n.committed; i++ {
		close(n.waits[i].ch)
	}
	if i > 0 {
		n.waits = slices.Delete(n.waits, 0, i)
	}
}

func (n *Node) truncateLocked() {
	upTo := n.committed
	if n.hasSucc {
		upTo = min(upTo, n.succApplied)
	}
	if upTo <= n.logBase {
		return
	}
	drop := int(min(upTo, n.applied) - n.logBase)
	drop = min(drop, len(n.entries))
	n.entries = n.entries[drop:]
	n.logBase += uint64(drop)
}

// applyLocked applies the write seq (== applied+1) and logs it; at the
// head (head set) a HeadStore completes the op that is logged. The caller
// then calls advanceLocked and notifyLocked, once for all the writes it
// applies together.
func (n *Node) applyLocked(ctx context.Context, seq uint64, op Op, head bool) error {
	if hs, ok := n.cfg.Store.(HeadStore); ok && head {
		var err error
		if op, err = hs.ApplyHead(ctx, seq, op); err != nil {
			return err
		}
	} else if err := n.cfg.Store.Apply(ctx, seq, op); err != nil {
		return err
	}
	n.applied = seq
	n.entries = append(n.entries, entry{seq, op})
	if op.Record == nil {
		n.dirty[string(op.Key)] = seq
	}
	return nil
}

// wrongShard is the refusal of a key the node's group may not serve (for
// that operation) under its shard map: codes.OutOfRange, on which a
// router reloads the map and tries again. n.mu is held.
func (n *Node) wrongShard(key []byte) error {
	return status.Errorf(codes.OutOfRange, "chain: group %s does not serve %q for this at shard map version %d", n.cfg.Group, key, n.shards.Version)
}

// setShards installs shard map m if it is newer than the node's and, with
// fence, returns once every write the node applied before it is
// committed: the writes taken under the older map are then on the
// group's tail, where a range move copies from. (A host starting an
// incarnation installs without fence: it serves nothing yet, and rejoins
// through a COPY.)
func (n *Node) setShards(ctx context.Context, m cluster.ShardMap, fence bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.shards != nil && n.shards.Version >= m.Version {
		return nil
	}
	n.shards = &m
	upTo := n.applied
	for fence && n.committed < upTo && n.applied >= upTo {
		ch := n.changed
		n.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			n.mu.Lock()
			return ctx.Err()
		}
		n.mu.Lock()
	}
	return nil
}

// shardWrites returns a copy of the node's write counters.
func (n *Node) shardWrites() map[string]uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.writes)
}

func epochErr(have, got uint64) error {
	return status.Errorf(codes.FailedPrecondition, "chain: epoch %d, request has %d", have, got)
}

// checkRequestLocked refuses a request for another group or routed by
// another epoch.
func (n *Node) checkRequestLocked(group string, epoch uint64) error {
	if group != n.cfg.Group {
		return status.Errorf(codes.NotFound, "chain: node %s does not serve group %q", n.cfg.ID, group)
	}
	if epoch != n.chain.Epoch {
		return epochErr(n.chain.Epoch, epoch)
	}
	return nil
}

// Put implements the head's write: sequence, apply, ship, wait for the
// commit point to pass it.
func (n *Node) Put(ctx context.Context, req *chainpb.PutRequest) (*chainpb.PutResponse, error) {
	if t, ok := n.cfg.Store.(Throttler); ok {
		if err := t.WaitForRoom(ctx); err != nil {
			return nil, status.Errorf(codes.Unavailable, "chain: %v", err)
		}
	}
	n.mu.Lock()
	if err := n.checkRequestLocked(req.Group, req.Epoch); err != nil {
		n.mu.Unlock()
		return nil, err
	}
	seq, err := n.headApplyLocked(ctx, Op{Key: req.Key, Value: req.Value, Delete: req.Delete})
	if err != nil {
		n.mu.Unlock()
		return nil, err
	}
	if err := n.waitCommitLocked(ctx, seq); err != nil {
		return nil, err
	}
	return &chainpb.PutResponse{Seq: seq}, nil
}

// headApplyLocked numbers op as the head's next write and applies it.
func (n *Node) headApplyLocked(ctx context.Context, op Op) (uint64, error) {
	if n.chain.Head() != n.cfg.ID || n.copying {
		return 0, status.Errorf(codes.FailedPrecondition, "chain: node %s is not the head of epoch %d", n.cfg.ID, n.chain.Epoch)
	}
	if n.shards != nil && op.Record == nil && !n.shards.CanWrite(n.cfg.Group, op.Key) {
		return 0, n.wrongShard(op.Key)
	}
	// A request whose client gave up (it waited for mu longer than the
	// client's attempt) is not applied: the client has sent it again, or
	// moved on to a later write of the same key, and applying this copy
	// now would put the older value after the newer one. The client
	// cancels an attempt before it sends the next, and the next reaches
	// this node on the same connection after the cancellation, so the
	// check under mu orders every attempt of a write before the next.
	if err := ctx.Err(); err != nil {
		return 0, status.FromContextError(err).Err()
	}
	seq := n.applied + 1
	if err := n.applyLocked(ctx, seq, op, true); err != nil {
		return 0, status.Errorf(codes.Internal, "chain: %v", err)
	}
	n.advanceLocked()
	n.notifyLocked()
	if n.shards != nil && op.Record == nil {
		n.writes[hex.EncodeToString(n.shards.Shards[n.shards.Lookup(op.Key)].Start)]++
	}
	return seq, nil
}

// waitCommitLocked waits until write seq is committed, and unlocks mu.
func (n *Node) waitCommitLocked(ctx context.Context, seq uint64) error {
	for n.committed < seq {
		ch := n.commitWaitLocked(seq)
		n.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
		n.mu.Lock()
	}
	n.mu.Unlock()
	return nil
}

// commitWaitLocked returns a channel closed once committed >= seq
// (seq > committed). A waiter that gives up stays in waits until then:
// there are at most as many as writes were in flight.
func (n *Node) commitWaitLocked(seq uint64) <-chan struct{} {
	w := commitWait{seq, make(chan struct{})}
	// Writes are numbered in order, so a new waiter almost always goes
	// last; after a COPY reset the commit point starts over lower.
	i := len(n.waits)
	for i > 0 && n.waits[i-1].seq > seq {
		i--
	}
	n.waits = slices.Insert(n.waits, i, w)
	return w.ch
}

// Append adds a store record at the head (Op.Record, completed by a
// HeadStore): numbered as the next write, shipped in order with the
// writes, and returned from once every member of the chain holds it.
// It fails if the node is not the head, or stops being it before the
// record is committed (a record the node applied but the chain lost is
// gone with the node's place in it).
func (n *Node) Append(ctx context.Context, record []byte) (uint64, error) {
	if record == nil {
		record = []byte{}
	}
	n.mu.Lock()
	epoch := n.chain.Epoch
	seq, err := n.headApplyLocked(ctx, Op{Record: record})
	if err != nil {
		n.mu.Unlock()
		return 0, err
	}
	for n.committed < seq {
		if n.chain.Epoch != epoch && n.chain.Head() != n.cfg.ID {
			n.mu.Unlock()
			return 0, status.Errorf(codes.Aborted, "chain: node %s stopped being the head before record %d was committed", n.cfg.ID, seq)
		}
		ch := n.changed
		n.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, status.FromContextError(ctx.Err()).Err()
		}
		n.mu.Lock()
	}
	n.mu.Unlock()
	return seq, nil
}

// admitRead paces store reads at ReadIOPS.
func (n *Node) admitRead(ctx context.Context) error {
	if n.cfg.ReadIOPS <= 0 {
		return nil
	}
	n.readMu.Lock()
	now := time.Now()
	at := n.nextRead
	if at.Before(now) {
		at = now
	}
	n.nextRead = at.Add(time.Duration(float64(time.Second) / n.cfg.ReadIOPS))
	n.readMu.Unlock()
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Get reads at this replica. The dirty check runs after the store read:
// a value read while its write was uncommitted is then reported dirty,
// and a write committed meanwhile makes the value a committed one.
func (n *Node) Get(ctx context.Context, req *chainpb.GetRequest) (*chainpb.GetResponse, error) {
	n.mu.Lock()
	if err := n.checkRequestLocked(req.Group, req.Epoch); err != nil {
		n.mu.Unlock()
		return nil, err
	}
	_, _, member := n.chain.Neighbours(n.cfg.ID)
	if !member || n.copying {
		n.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "chain: node %s is not a member of epoch %d", n.cfg.ID, n.chain.Epoch)
	}
	if n.shards != nil && !n.shards.CanRead(n.cfg.Group, req.Key) {
		err := n.wrongShard(req.Key)
		n.mu.Unlock()
		return nil, err
	}
	tail := n.isTailLocked()
	n.mu.Unlock()
	if err := n.admitRead(ctx); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	v, found, err := n.cfg.Store.Get(ctx, req.Key)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "chain: get: %v", err)
	}
	if !tail {
		n.mu.Lock()
		_, dirty := n.dirty[string(req.Key)]
		n.mu.Unlock()
		if dirty {
			return &chainpb.GetResponse{Dirty: true}, nil
		}
	}
	return &chainpb.GetResponse{Value: v, Found: found}, nil
}

func (n *Node) conn(addr string) (*grpc.ClientConn, error) {
	n.connMu.Lock()
	defer n.connMu.Unlock()
	if c, ok := n.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, dialOptions()...)
	if err != nil {
		return nil, err
	}
	n.conns[addr] = c
	return c, nil
}

func (n *Node) closeConns() {
	n.connMu.Lock()
	defer n.connMu.Unlock()
	for _, c := range n.conns {
		c.Close()
	}
	n.conns = map[string]*grpc.ClientConn{}
}

// shipLoop keeps a Ship stream to succ open for configuration c,
// reconnecting after errors, until ctx ends.
func (n *Node) shipLoop(ctx context.Context, c cluster.Chain, succ string) {
	for ctx.Err() == nil {
		err := n.ship(ctx, c, succ)
		if ctx.Err() != nil {
			return
		}
		n.log.Debug("ship", "to", succ, "epoch", c.Epoch, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (n *Node) ship(ctx context.Context, c cluster.Chain, succ string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodes, err := n.cfg.Control.Nodes(ctx)
	if err != nil {
		return err
	}
	info, ok := nodes[succ]
	if !ok {
		return fmt.Errorf("successor %s is not registered", succ)
	}
	cc, err := n.conn(info.Addr)
	if err != nil {
		return err
	}
	st, err := chainpb.NewChainClient(cc).Ship(ctx)
	if err != nil {
		return err
	}
	hdr := func(m *chainpb.ShipMsg) *chainpb.ShipMsg {
		m.Group, m.Epoch, m.From = n.cfg.Group, c.Epoch, n.cfg.ID
		return m
	}
	if err := st.Send(hdr(&chainpb.ShipMsg{Body: &chainpb.ShipMsg_Hello{Hello: &chainpb.Hello{}}})); err != nil {
		return err
	}
	hello, err := st.Recv()
	if err != nil {
		return err
	}
	// Where the successor starts: from the log when it holds everything
	// the log does not, else from a COPY of a snapshot taken now.
	var snap Snapshot
	n.mu.Lock()
	n.takeNotesLocked(hello.Notes)
	cursor := hello.Applied + 1
	// A joining node always gets a COPY: it left the chain when it
	// started, and what it still holds may have writes the chain never
	// committed under sequence numbers since given to others.
	if succ == c.Joining || hello.Applied < n.logBase || hello.Applied > n.applied {
		if snap, err = n.cfg.Store.Snapshot(); err != nil {
			n.mu.Unlock()
			return err
		}
		cursor = snap.Seq() + 1
		n.succApplied = min(n.succApplied, snap.Seq())
	}
	n.mu.Unlock()
	if snap != nil {
		n.log.Info("COPY", "to", succ, "seq", snap.Seq(), "their_applied", hello.Applied)
		err := n.sendCopy(ctx, st, hdr, snap)
		snap.Close()
		if err != nil {
			return fmt.Errorf("COPY to %s: %w", succ, err)
		}
	}
	recvErr := make(chan error, 1)
	go func() { recvErr <- n.recvAcks(ctx, st, c, succ) }()
	// Group commit: a message carries every write applied since the
	// last (up to maxShipBytes), and at most window messages are
	// uncommitted at a time; the writes applied meanwhile wait and go
	// together in the next. inFlight is the last seq of each message
	// sent and not yet committed.
	window := n.cfg.ShipWindow
	var inFlight []uint64
	for {
		n.mu.Lock()
		for {
			k := 0
			for k < len(inFlight) && inFlight[k] <= n.committed {
				k++
			}
			inFlight = inFlight[k:]
			if cursor <= n.applied && len(inFlight) < window {
				break
			}
			ch := n.changed
			n.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			case err := <-recvErr:
				return err
			}
			n.mu.Lock()
		}
		if cursor <= n.logBase {
			n.mu.Unlock()
			return fmt.Errorf("write %d already dropped from the log (base %d)", cursor, n.logBase)
		}
		batch := n.entries[cursor-n.logBase-1:]
		ws := make([]*chainpb.Write, shipBatchLen(batch))
		for i, e := range batch[:len(ws)] {
			ws[i] = &chainpb.Write{Seq: e.seq, Key: e.op.Key, Value: e.op.Value, Delete: e.op.Delete, Tag: e.op.Tag, Record: e.op.Record}
		}
		n.mu.Unlock()
		if err := st.Send(hdr(&chainpb.ShipMsg{Body: &chainpb.ShipMsg_Writes{Writes: &chainpb.Writes{Writes: ws}}})); err != nil {
			return err
		}
		n.shipMsgs.Add(1)
		n.shipWrites.Add(uint64(len(ws)))
		cursor += uint64(len(ws))
		inFlight = append(inFlight, cursor-1)
	}
}

// ShipStats counts what a node shipped to its successors.
type ShipStats struct {
	// Messages is the number of write messages sent, Writes the writes
	// in them: Writes/Messages is how many writes a message carried on
	// average (group commit down the chain).
	Messages, Writes uint64
}

// ShipStats returns what the node shipped since it started.
func (n *Node) ShipStats() ShipStats {
	return ShipStats{Messages: n.shipMsgs.Load(), Writes: n.shipWrites.Load()}
}

// maxShipBytes bounds the keys, values and records of the writes one
// Ship message carries (one write may be larger on its own), well under
// gRPC's 4 MiB default receive limit.
const maxShipBytes = 1 << 20

// shipBatchLen is how many of the first writes of batch (at least one)
// go in the next message.
func shipBatchLen(batch []entry) int {
	size := 0
	for i, e := range batch {
		size += len(e.op.Key) + len(e.op.Value) + len(e.op.Record)
		if i > 0 && size > maxShipBytes {
			return i
		}
	}
	return len(batch)
}

func (n *Node) sendCopy(ctx context.Context, st chainpb.Chain_ShipClient, hdr func(*chainpb.ShipMsg) *chainpb.ShipMsg, snap Snapshot) error {
	var chunk []*chainpb.KV
	flush := func() error {
		m := hdr(&chainpb.ShipMsg{Body: &chainpb.ShipMsg_Chunk{Chunk: &chainpb.CopyChunk{Kvs: chunk}}})
		chunk = nil
		return st.Send(m)
	}
	if err := snap.Range(ctx, func(k, v []byte) error {
		chunk = append(chunk, &chainpb.KV{Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)})
		if len(chunk) >= n.cfg.CopyChunk {
			return flush()
		}
		return nil
	}); err != nil {
		return err
	}
	if err := flush(); err != nil { // at least one chunk: it starts the COPY
		return err
	}
	return st.Send(hdr(&chainpb.ShipMsg{Body: &chainpb.ShipMsg_Done{Done: &chainpb.CopyDone{Seq: snap.Seq()}}}))
}

// recvAcks takes the successor's acks: its applied point bounds the log's
// truncation, and its committed point is this node's (a joiner's applied
// point, while gating, when this node is the tail).
func (n *Node) recvAcks(ctx context.Context, st chainpb.Chain_ShipClient, c cluster.Chain, succ string) error {
	for {
		a, err := st.Recv()
		if err != nil {
			return err
		}
		n.mu.Lock()
		if n.chain.Epoch != c.Epoch {
			n.mu.Unlock()
			return ctx.Err()
		}
		n.succApplied = max(n.succApplied, min(a.Applied, n.applied))
		n.takeNotesLocked(a.Notes)
		if succ == n.joiner {
			n.joinerAck = a.Applied
			if !n.gating {
				n.gating, n.gateFrom = true, n.committed
			}
			if n.joinerAck >= n.gateFrom && !n.promoting {
				n.promoting = true
				go n.promote(ctx, c, succ)
			}
		} else {
			n.setCommittedLocked(a.Committed)
		}
		n.advanceLocked()
		n.notifyLocked()
		n.mu.Unlock()
	}
}

// promote makes the caught-up joiner the tail, by a compare-and-swap from
// the configuration it joined in.
func (n *Node) promote(ctx context.Context, c cluster.Chain, id string) {
	_, ok, err := n.cfg.Control.Update(ctx, n.cfg.Group, func(cur cluster.Chain) (cluster.Chain, bool, error) {
		if cur.Epoch != c.Epoch {
			return cur, false, nil
		}
		next, _, err := cluster.Promote(cur, id)
		return next, err == nil, err
	})
	if err != nil || !ok {
		// A newer configuration (which cancels ctx) supersedes this join.
		n.log.Info("promote not written", "joiner", id, "epoch", c.Epoch, "err", err)
		return
	}
	n.log.Info("joined", "node", id, "epoch", c.Epoch+1)
}

// Ship receives a predecessor's stream (or, at a joining node, the
// tail's).
func (n *Node) Ship(st chainpb.Chain_ShipServer) error {
	ctx := st.Context()
	first, err := st.Recv()
	if err != nil {
		return err
	}
	if err := n.checkSender(first); err != nil {
		return err
	}
	if first.GetHello() == nil {
		return status.Error(codes.InvalidArgument, "chain: stream must start with hello")
	}
	sent := map[string]uint64{}
	n.mu.Lock()
	n.ownNoteLocked()
	a := &chainpb.ShipAck{Applied: n.applied, Committed: n.committed, Notes: n.newNotesLocked(sent)}
	copies := n.copies
	n.mu.Unlock()
	if err := st.Send(a); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sendErr := make(chan error, 1)
	go func() { sendErr <- n.sendAcks(ctx, st, a, copies, sent) }()
	copyStarted := false // a COPY on this stream has reset the store
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case err := <-sendErr:
			return err
		default:
		}
		if err := n.checkSender(m); err != nil {
			return err
		}
		if err := n.receive(ctx, m, &copyStarted); err != nil {
			return err
		}
	}
}

// checkSender accepts messages only from this node's predecessor in the
// current epoch (or the tail, at a joining node).
func (n *Node) checkSender(m *chainpb.ShipMsg) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.checkRequestLocked(m.Group, m.Epoch); err != nil {
		return err
	}
	pred, _, member := n.chain.Neighbours(n.cfg.ID)
	if !member && n.chain.Joining == n.cfg.ID {
		pred = n.chain.Tail()
	}
	if pred == "" || m.From != pred {
		return status.Errorf(codes.FailedPrecondition, "chain: %s is not %s's predecessor in epoch %d", m.From, n.cfg.ID, n.chain.Epoch)
	}
	return nil
}

func (n *Node) receive(ctx context.Context, m *chainpb.ShipMsg, copyStarted *bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch b := m.Body.(type) {
	case *chainpb.ShipMsg_Write:
		return n.receiveWritesLocked(ctx, []*chainpb.Write{b.Write})
	case *chainpb.ShipMsg_Writes:
		return n.receiveWritesLocked(ctx, b.Writes.Writes)
	case *chainpb.ShipMsg_Chunk:
		if !*copyStarted { // a COPY broken off earlier starts over
			*copyStarted = true
			if err := n.cfg.Store.Reset(ctx); err != nil {
				return status.Errorf(codes.Internal, "chain: %v", err)
			}
			n.copying = true
			n.applied, n.committed, n.logBase, n.succApplied = 0, 0, 0, 0
			n.entries, n.dirty = nil, map[string]uint64{}
		}
		kvs := make([]KV, len(b.Chunk.Kvs))
		for i, kv := range b.Chunk.Kvs {
			kvs[i] = KV{Key: kv.Key, Value: kv.Value}
		}
		if err := n.cfg.Store.Import(ctx, kvs); err != nil {
			return status.Errorf(codes.Internal, "chain: %v", err)
		}
	case *chainpb.ShipMsg_Done:
		if !*copyStarted {
			return status.Error(codes.FailedPrecondition, "chain: COPY done without a COPY")
		}
		if err := n.cfg.Store.SetApplied(ctx, b.Done.Seq); err != nil {
			return status.Errorf(codes.Internal, "chain: %v", err)
		}
		n.copying = false
		n.copies++
		s := b.Done.Seq
		n.applied, n.committed, n.logBase, n.succApplied = s, s, s, s
		n.releaseWaitsLocked()
		n.log.Info("COPY received", "seq", s)
		n.notifyLocked()
	default:
		return status.Error(codes.InvalidArgument, "chain: unexpected message")
	}
	return nil
}

// receiveWritesLocked applies the shipped writes ws in order, skipping
// those applied already, and then moves the commit point and wakes the
// node's waiters once for all of them (also when one fails: the writes
// before it are applied and logged).
func (n *Node) receiveWritesLocked(ctx context.Context, ws []*chainpb.Write) error {
	if n.copying {
		return status.Error(codes.FailedPrecondition, "chain: write during COPY")
	}
	from := n.applied
	defer func() {
		if n.applied != from {
			n.advanceLocked()
			n.notifyLocked()
		}
	}()
	for _, w := range ws {
		if w.Seq <= n.applied {
			continue // shipped again after a reconfiguration
		}
		if w.Seq != n.applied+1 {
			return status.Errorf(codes.FailedPrecondition, "chain: write %d after %d: gap", w.Seq, n.applied)
		}
		if err := n.applyLocked(ctx, w.Seq, Op{Key: w.Key, Value: w.Value, Delete: w.Delete, Tag: w.Tag, Record: w.Record}, false); err != nil {
			return status.Errorf(codes.Internal, "chain: %v", err)
		}
	}
	return nil
}

// sendAcks reports this node's applied and committed points upstream
// (not during a COPY), and the store notes newer than those sent on this
// stream (sent: origin → version). It acks when the committed point
// moves, which at the tail is whenever applied does; a move of applied
// alone is acked only by a joining node, whose applied point is what
// the tail gates its commits and the join on. Elsewhere the predecessor
// has no use for it before the next commit (it truncates its log to
// min(committed, successor's applied), and committed <= applied here),
// and leaving it out halves the acks a middle node sends.
func (n *Node) sendAcks(ctx context.Context, st chainpb.Chain_ShipServer, last *chainpb.ShipAck, copies uint64, sent map[string]uint64) error {
	for {
		n.mu.Lock()
		var notes []*chainpb.Note
		for {
			noteChanged := n.ownNoteLocked()
			notes = n.newNotesLocked(sent)
			moved := n.committed != last.Committed || (n.applied != last.Applied && n.chain.Joining == n.cfg.ID)
			if !n.copying && (len(notes) > 0 || moved || n.copies != copies) {
				break
			}
			ch := n.changed
			n.mu.Unlock()
			select {
			case <-ch:
			case <-noteChanged:
			case <-ctx.Done():
				return ctx.Err()
			}
			n.mu.Lock()
		}
		a := &chainpb.ShipAck{Applied: n.applied, Committed: n.committed, Notes: notes}
		copies = n.copies
		n.mu.Unlock()
		if err := st.Send(a); err != nil {
			return err
		}
		last = a
	}
}

// RangeScanner is what Scan needs of a Store beyond the Store interface:
// the live keys in [start, end) in key order (end nil: no bound), fn
// called for each until it returns an error, which Scan returns (wrapped
// or not). It may run beside writes. A Store without it is scanned
// through a Snapshot.
type RangeScanner interface {
	Scan(ctx context.Context, start, end []byte, fn func(key, value []byte) error) error
}

// MaxScan is the most keys one Scan RPC returns; a client asks again
// from past the last key for more.
const MaxScan = 1000

// errStopScan ends a scan that has its keys.
var errStopScan = errors.New("chain: scan has its keys")

// Scan reads a key range at the tail, where every write is committed.
func (n *Node) Scan(ctx context.Context, req *chainpb.ScanRequest) (*chainpb.ScanResponse, error) {
	n.mu.Lock()
	if err := n.checkRequestLocked(req.Group, req.Epoch); err != nil {
		n.mu.Unlock()
		return nil, err
	}
	if !n.isTailLocked() || n.copying {
		n.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "chain: node %s is not the tail of epoch %d", n.cfg.ID, n.chain.Epoch)
	}
	end := req.End
	if len(end) == 0 {
		end = nil
	}
	if n.shards != nil && !n.shards.CanScan(n.cfg.Group, req.Start, end) {
		err := n.wrongShard(req.Start)
		n.mu.Unlock()
		return nil, err
	}
	rs, ok := n.cfg.Store.(RangeScanner)
	var snap Snapshot
	if !ok {
		// Taken under mu, so no write runs (the Snapshot contract).
		var err error
		if snap, err = n.cfg.Store.Snapshot(); err != nil {
			n.mu.Unlock()
			return nil, status.Errorf(codes.Internal, "chain: scan: %v", err)
		}
		defer snap.Close()
	}
	n.mu.Unlock()
	limit := int(req.Limit)
	if limit <= 0 || limit > MaxScan {
		limit = MaxScan
	}
	resp := &chainpb.ScanResponse{}
	fn := func(k, v []byte) error {
		if bytes.Compare(k, req.Start) < 0 || (end != nil && bytes.Compare(k, end) >= 0) {
			return nil
		}
		if len(resp.Kvs) == limit {
			resp.More = true
			return errStopScan
		}
		resp.Kvs = append(resp.Kvs, &chainpb.KV{Key: bytes.Clone(k), Value: bytes.Clone(v)})
		return nil
	}
	var err error
	if rs != nil {
		err = rs.Scan(ctx, req.Start, end, fn)
	} else {
		err = snap.Range(ctx, fn)
	}
	if err != nil && !errors.Is(err, errStopScan) {
		return nil, status.Errorf(codes.Internal, "chain: scan: %v", err)
	}
	return resp, nil
}

// ownNoteLocked records the store's newest note among the notes (a
// Noter's) and returns the channel that tells of the next (nil: none).
func (n *Node) ownNoteLocked() <-chan struct{} {
	nt, ok := n.cfg.Store.(Noter)
	if !ok {
		return nil
	}
	body, v, ch := nt.Note()
	if body != nil && v > n.notes[n.cfg.ID].version {
		n.notes[n.cfg.ID] = note{v, body}
	}
	return ch
}

// newNotesLocked returns the notes newer than sent says this stream
// carried, and marks them sent.
func (n *Node) newNotesLocked(sent map[string]uint64) []*chainpb.Note {
	var out []*chainpb.Note
	for from, nt := range n.notes {
		if nt.version > sent[from] {
			out = append(out, &chainpb.Note{From: from, Version: nt.version, Body: nt.body})
			sent[from] = nt.version
		}
	}
	return out
}

// takeNotesLocked keeps the newer of the successor's notes and gives
// them to a Noter store.
func (n *Node) takeNotesLocked(notes []*chainpb.Note) {
	nt, isNoter := n.cfg.Store.(Noter)
	for _, m := range notes {
		if m.From == n.cfg.ID || m.Version <= n.notes[m.From].version {
			continue
		}
		n.notes[m.From] = note{m.Version, m.Body}
		if isNoter {
			nt.Noted(m.From, m.Version, m.Body)
		}
		n.notifyLocked()
	}
}

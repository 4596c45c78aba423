package rubble

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
)

// NodeNQN is the NQN of the subsystem a RubbleDB node's target exports
// its volume under (namespace 1): the node's ID makes it, so a primary
// needs only the address etcd publishes (cluster.Node.Target).
func NodeNQN(id string) string { return "nqn.2026-11.io.nearstore:rubble:" + id }

// TargetDialer is a Dialer over NVMe/TCP (the host library): it finds a
// node's target in etcd and keeps one controller per node, shared by
// every group the dialing node ships for.
//
// With Group set it fences (FenceSlots): every Dial first makes sure the
// target admits slot writes from this node only as the head of its
// latest epoch (Fence) and refuses a write of a deposed head. Each group
// then needs a TargetDialer of its own: the registration is the host
// NQN's, and the NQN names the group.
type TargetDialer struct {
	// Control finds the node's target address.
	Control *cluster.Control
	// Self is the dialing node's ID (its host NQN is made from it).
	Self string
	// Group is the replication group the dialer ships for ("": no
	// fencing, the NQN names no group).
	Group string

	mu    sync.Mutex // guards conns; held while dialing and fencing
	conns map[string]*dialed
	// epoch is the epoch this node heads (Fence); 0: it heads none. Not
	// under mu: Fence, called under the chain node's lock, must not wait
	// for a Dial connecting to a hung target.
	epoch atomic.Uint64
}

// Fence implements Fencer: the node is the head of its group's chain
// of epoch (0: it is not the head), which every later Dial fences with.
func (d *TargetDialer) Fence(epoch uint64) { d.epoch.Store(epoch) }

func (d *TargetDialer) hostNQN() string {
	if d.Group == "" {
		return NodeNQN(d.Self) + ":host"
	}
	return NodeNQN(d.Self) + ":host:" + d.Group
}

type dialed struct {
	addr string
	ctrl *host.Controller
	ns   *host.Namespace
}

// Dial implements Dialer.
func (d *TargetDialer) Dial(ctx context.Context, node string) (SlotWriter, error) {
	nodes, err := d.Control.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	info, ok := nodes[node]
	if !ok || info.Target == "" {
		return nil, fmt.Errorf("rubble: node %s has no target registered", node)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.conns[node]; ok {
		if c.addr == info.Target {
			return c.ns, d.fenceLocked(ctx, node, c.ns)
		}
		c.ctrl.Close()
		delete(d.conns, node)
	}
	if d.Group != "" && d.epoch.Load() == 0 {
		return nil, fmt.Errorf("rubble: ship to %s: %w: this node heads no epoch of %s", node, ErrDeposed, d.Group)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ctrl, err := host.Connect(cctx, info.Target, NodeNQN(node), host.Options{
		HostNQN: d.hostNQN(), HostID: fenceHostID(d.Group, d.Self), IOQueues: 2,
		// A dead secondary fails its writes quickly: the edit goes on
		// without it.
		MaxReconnectWait: 2 * time.Second, ControllerLossTimeout: 10 * time.Second,
		// Shipping is background work between flushes and compactions:
		// no polling for completions, whose CPU the node's requests need.
		PollSpin: -1,
	})
	if err != nil {
		return nil, fmt.Errorf("rubble: connect to %s's target at %s: %w", node, info.Target, err)
	}
	ns, err := ctrl.Namespace(1)
	if err != nil {
		ctrl.Close()
		return nil, err
	}
	if d.conns == nil {
		d.conns = map[string]*dialed{}
	}
	d.conns[node] = &dialed{addr: info.Target, ctrl: ctrl, ns: ns}
	return ns, d.fenceLocked(ctx, node, ns)
}

// fenceLocked fences node's namespace. A fence that fails for another
// reason than a newer head (the connection lost for good, say: the
// target was away past ControllerLossTimeout) closes the connection, so
// the next Dial connects anew instead of failing on it for good.
func (d *TargetDialer) fenceLocked(ctx context.Context, node string, ns *host.Namespace) error {
	if d.Group == "" {
		return nil
	}
	if err := FenceSlots(ctx, ns, d.Group, d.epoch.Load()); err != nil {
		if !errors.Is(err, ErrDeposed) {
			if c, ok := d.conns[node]; ok {
				c.ctrl.Close()
				delete(d.conns, node)
			}
		}
		return fmt.Errorf("rubble: ship to %s: %w", node, err)
	}
	return nil
}

// ErrDeposed is the error of a slot write fenced off: a head of a newer
// epoch of the group fenced the target, or the node heads no epoch.
var ErrDeposed = errors.New("rubble: not the head of the group's newest epoch")

// Reserver is the reservation side of a namespace (host.Namespace).
type Reserver interface {
	Report(ctx context.Context) (nvme.ReservationStatus, error)
	Register(ctx context.Context, o host.RegisterOpts) error
	Acquire(ctx context.Context, o host.AcquireOpts) error
}

// fenceType is the reservation a fenced namespace holds: Write Exclusive
// - All Registrants, so any host reads, and only registrants write.
const fenceType = nvme.ResvWriteExclusiveAllRegs

// A registration's key is FenceKey: a hash of the group in the high 24
// bits, so that preempting one group's old key leaves the other groups'
// heads registered, and the epoch in the low 40.
const (
	fenceEpochBits = 40
	fenceEpochMask = 1<<fenceEpochBits - 1
)

// FenceKey is the reservation key group's head of epoch registers with
// on the targets it writes slots into (FenceSlots), as a Reservation
// Report shows it.
func FenceKey(group string, epoch uint64) uint64 {
	h := sha256.Sum256([]byte(group))
	return binary.LittleEndian.Uint64(h[:])&^fenceEpochMask | epoch
}

// fenceHostID is the Connect host identifier of group's head on node
// self: its first 8 bytes name the group, so a head finds, in the
// namespace's Reservation Report, the registrations of its group's
// other heads; the rest name the node.
func fenceHostID(group, self string) [16]byte {
	var id [16]byte
	g, n := sha256.Sum256([]byte(group)), sha256.Sum256([]byte(self))
	copy(id[:8], g[:8])
	copy(id[8:], n[:8])
	return id
}

// FenceSlots makes ns (a secondary's namespace, holding its slot pools)
// take slot writes for group only from its head of epoch, the group's
// newest: the fencing of RubbleDB's slot writes (doc.go, "Fencing").
//
// The head registers with its epoch as the key (its host NQN and
// identifier name the group, fenceHostID) and holds, with every
// registrant, a Write Exclusive - All Registrants reservation, so a
// host not registered cannot write; it preempts (unregisters) the
// group's registrants of older epochs, so a deposed head's writes fail
// with Reservation Conflict from then on; and it refuses to write
// (ErrDeposed, its registration dropped again) if the group has a
// registrant of a newer epoch. Every step is checked against a
// Reservation Report read after registering, so of two heads racing,
// the older one either sees the newer and stops, or registered before
// the newer one, whose preemption then removes it. Reservations are
// not persistent: a target that restarts has none, and the next write
// of the group's head registers again.
func FenceSlots(ctx context.Context, ns Reserver, group string, epoch uint64) error {
	if epoch == 0 {
		return fmt.Errorf("%w: this node heads no epoch of %s", ErrDeposed, group)
	}
	if epoch > fenceEpochMask {
		return fmt.Errorf("rubble: fence: epoch %d of %s past the key's %d bits", epoch, group, fenceEpochBits)
	}
	key := FenceKey(group, epoch)
	st, err := ns.Report(ctx)
	if err != nil {
		return fmt.Errorf("rubble: fence: %w", err)
	}
	tag := fenceHostID(group, "")
	mine := func(st nvme.ReservationStatus) (registered bool, older []uint64, newer uint64) {
		for _, r := range st.Registrants {
			if [8]byte(r.HostID[:8]) != [8]byte(tag[:8]) {
				continue // another group's
			}
			switch {
			case r.Key == key:
				registered = true
			case r.Key < key:
				older = append(older, r.Key)
			default:
				newer = max(newer, r.Key&fenceEpochMask)
			}
		}
		return registered, older, newer
	}
	registered, older, newer := mine(st)
	if newer != 0 {
		return fmt.Errorf("%w: epoch %d of %s fenced epoch %d", ErrDeposed, newer, group, epoch)
	}
	if registered && len(older) == 0 && st.Type == fenceType {
		return nil // fenced already: the steady state, one command
	}
	if !registered {
		err := ns.Register(ctx, host.RegisterOpts{Action: host.RegisterKey, NewKey: key})
		if errors.Is(err, host.ErrReservationConflict) {
			// Registered under an older epoch of this node's.
			err = ns.Register(ctx, host.RegisterOpts{Action: host.ReplaceKey, NewKey: key, IgnoreExistingKey: true})
		}
		if err != nil {
			return fmt.Errorf("rubble: fence: register epoch %d: %w", epoch, err)
		}
	}
	if st.Type != fenceType {
		if err := ns.Acquire(ctx, host.AcquireOpts{Action: host.AcquireReservation, Type: fenceType, Key: key}); err != nil {
			return fmt.Errorf("rubble: fence: acquire: %w", err)
		}
	}
	// Read again, registered: a newer head that registered meanwhile is
	// seen now, or registered after this point and preempts us.
	if st, err = ns.Report(ctx); err != nil {
		return fmt.Errorf("rubble: fence: %w", err)
	}
	registered, older, newer = mine(st)
	if newer != 0 {
		_ = ns.Register(ctx, host.RegisterOpts{Action: host.UnregisterKey, CurrentKey: key})
		return fmt.Errorf("%w: epoch %d of %s fenced epoch %d", ErrDeposed, newer, group, epoch)
	}
	if !registered || st.Type != fenceType {
		return fmt.Errorf("rubble: fence: epoch %d of %s: registered %v, reservation %v", epoch, group, registered, st.Type)
	}
	for _, k := range older {
		err := ns.Acquire(ctx, host.AcquireOpts{Action: host.Preempt, Type: fenceType, Key: key, PreemptKey: k})
		if err != nil && !errors.Is(err, host.ErrReservationConflict) { // conflict: gone already
			return fmt.Errorf("rubble: fence: preempt epoch %d: %w", k&fenceEpochMask, err)
		}
	}
	return nil
}

// Drop implements Dialer.
func (d *TargetDialer) Drop(node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.conns[node]; ok {
		c.ctrl.Close()
		delete(d.conns, node)
	}
}

// Close closes every connection.
func (d *TargetDialer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, c := range d.conns {
		c.ctrl.Close()
		delete(d.conns, id)
	}
}

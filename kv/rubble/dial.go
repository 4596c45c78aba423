package rubble

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/host"
)

// NodeNQN is the NQN of the subsystem a RubbleDB node's target exports
// its volume under (namespace 1): the node's ID makes it, so a primary
// needs only the address etcd publishes (cluster.Node.Target).
func NodeNQN(id string) string { return "nqn.2026-11.io.nearstore:rubble:" + id }

// TargetDialer is a Dialer over NVMe/TCP (the host library): it finds a
// node's target in etcd and keeps one controller per node, shared by
// every group the dialing node ships for.
type TargetDialer struct {
	// Control finds the node's target address.
	Control *cluster.Control
	// Self is the dialing node's ID (its host NQN is made from it).
	Self string

	mu    sync.Mutex
	conns map[string]*dialed
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
			return c.ns, nil
		}
		c.ctrl.Close()
		delete(d.conns, node)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ctrl, err := host.Connect(cctx, info.Target, NodeNQN(node), host.Options{
		HostNQN: NodeNQN(d.Self) + ":host", IOQueues: 2,
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
	return ns, nil
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

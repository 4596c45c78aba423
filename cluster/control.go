package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultPrefix is the etcd key prefix of a nearstore cluster.
const DefaultPrefix = "/nearstore/"

// ErrNoChain: the group has no configuration in etcd yet.
var ErrNoChain = errors.New("cluster: group has no chain")

// Node is a storage node's registration, the value of its key under
// nodes/. The key is attached to the node's lease: it disappears when the
// node stops renewing it, which is how the cluster learns a node died.
type Node struct {
	ID     string   `json:"id"`
	Addr   string   `json:"addr"`   // host:port of its chain (gRPC) service
	Groups []string `json:"groups"` // the replication groups it serves
	// Target is the host:port of the node's NVMe/TCP target, if it
	// exports a volume to its peers (kv/rubble: the primary writes its
	// tables into the secondaries' slot pools there); empty: none.
	Target string `json:"target,omitempty"`
}

// Control reads and changes the cluster's state in etcd. Keys, under
// Prefix:
//
//	nodes/<id>      Node (JSON), attached to the node's lease
//	chains/<group>  Chain (JSON), changed only by compare-and-swap
//
// Every change of a chain is one etcd transaction that compares the
// stored value (which holds the epoch) with the one the change was
// computed from: two controllers racing cannot both win, and the loser
// recomputes from the winner's configuration.
type Control struct {
	Client *clientv3.Client
	Prefix string
	Log    *slog.Logger
}

func (c *Control) prefix() string {
	if c.Prefix == "" {
		return DefaultPrefix
	}
	return c.Prefix
}

func (c *Control) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// NodeKey is the etcd key of node id.
func (c *Control) NodeKey(id string) string { return c.prefix() + "nodes/" + id }

// ChainKey is the etcd key of group's chain.
func (c *Control) ChainKey(group string) string { return c.prefix() + "chains/" + group }

// Registration is a node's live membership: its lease, kept alive until
// Close or until the process dies.
type Registration struct {
	session *concurrency.Session
}

// Done is closed when the lease is lost (expired or revoked): the node
// must then stop serving, since the cluster has taken it out.
func (r *Registration) Done() <-chan struct{} { return r.session.Done() }

// Close revokes the lease, which removes the node at once.
func (r *Registration) Close() error { return r.session.Close() }

// Register puts n under nodes/ with a lease of ttl seconds, renewed in
// the background.
func (c *Control) Register(ctx context.Context, n Node, ttl int) (*Registration, error) {
	if n.ID == "" || strings.Contains(n.ID, "/") {
		return nil, fmt.Errorf("cluster: bad node ID %q", n.ID)
	}
	s, err := concurrency.NewSession(c.Client, concurrency.WithTTL(ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("cluster: lease: %w", err)
	}
	b, err := json.Marshal(n)
	if err != nil {
		s.Close()
		return nil, err
	}
	if _, err := c.Client.Put(ctx, c.NodeKey(n.ID), string(b), clientv3.WithLease(s.Lease())); err != nil {
		s.Close()
		return nil, fmt.Errorf("cluster: register %s: %w", n.ID, err)
	}
	return &Registration{session: s}, nil
}

// Nodes returns the live nodes by ID.
func (c *Control) Nodes(ctx context.Context) (map[string]Node, error) {
	resp, err := c.Client.Get(ctx, c.prefix()+"nodes/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("cluster: list nodes: %w", err)
	}
	out := make(map[string]Node, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var n Node
		if err := json.Unmarshal(kv.Value, &n); err != nil {
			return nil, fmt.Errorf("cluster: node %s: %w", kv.Key, err)
		}
		out[n.ID] = n
	}
	return out, nil
}

// Chain returns group's configuration, or ErrNoChain.
func (c *Control) Chain(ctx context.Context, group string) (Chain, error) {
	ch, _, err := c.chainRaw(ctx, group)
	return ch, err
}

func (c *Control) chainRaw(ctx context.Context, group string) (Chain, []byte, error) {
	resp, err := c.Client.Get(ctx, c.ChainKey(group))
	if err != nil {
		return Chain{}, nil, fmt.Errorf("cluster: get chain %s: %w", group, err)
	}
	if len(resp.Kvs) == 0 {
		return Chain{}, nil, fmt.Errorf("%w: %s", ErrNoChain, group)
	}
	ch, err := DecodeChain(resp.Kvs[0].Value)
	return ch, resp.Kvs[0].Value, err
}

// CreateChain writes group's first configuration (epoch 1, members in
// order) unless the group already has one, and returns the configuration
// in force.
func (c *Control) CreateChain(ctx context.Context, group string, members []string) (Chain, error) {
	ch := Chain{Group: group, Epoch: 1, Members: slices.Clone(members)}
	b, err := EncodeChain(ch)
	if err != nil {
		return Chain{}, err
	}
	key := c.ChainKey(group)
	_, err = c.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).
		Commit()
	if err != nil {
		return Chain{}, fmt.Errorf("cluster: create chain %s: %w", group, err)
	}
	return c.Chain(ctx, group)
}

// Update changes group's chain by fn, atomically: fn gets the current
// configuration and returns the next one and whether to write it; the
// write is a transaction conditional on the stored value being the one fn
// saw, retried with the new value when another change won. It returns the
// configuration in force afterwards and whether fn's change was written.
func (c *Control) Update(ctx context.Context, group string, fn func(Chain) (Chain, bool, error)) (Chain, bool, error) {
	key := c.ChainKey(group)
	for {
		cur, raw, err := c.chainRaw(ctx, group)
		if err != nil {
			return Chain{}, false, err
		}
		next, write, err := fn(cur.Clone())
		if err != nil || !write {
			return cur, false, err
		}
		if next.Epoch != cur.Epoch+1 || next.Group != cur.Group {
			return cur, false, fmt.Errorf("cluster: chain %s: change from epoch %d must have epoch %d, has %d", group, cur.Epoch, cur.Epoch+1, next.Epoch)
		}
		b, err := EncodeChain(next)
		if err != nil {
			return cur, false, err
		}
		resp, err := c.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(key), "=", string(raw))).
			Then(clientv3.OpPut(key, string(b))).
			Commit()
		if err != nil {
			return cur, false, fmt.Errorf("cluster: update chain %s: %w", group, err)
		}
		if resp.Succeeded {
			return next, true, nil
		}
	}
}

// Reconcile runs Reconfigure once against the live nodes and writes the
// result if it changed anything.
func (c *Control) Reconcile(ctx context.Context, group string) (Chain, []Event, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return Chain{}, nil, err
	}
	live := make(map[string]bool, len(nodes))
	var cands []string
	for id, n := range nodes {
		live[id] = true
		if slices.Contains(n.Groups, group) {
			cands = append(cands, id)
		}
	}
	slices.Sort(cands)
	var events []Event
	ch, _, err := c.Update(ctx, group, func(cur Chain) (Chain, bool, error) {
		next, ev := Reconfigure(cur, live, cands)
		events = ev
		return next, len(ev) > 0, nil
	})
	if err != nil {
		return ch, nil, err
	}
	for _, e := range events {
		c.log().Info("chain reconfigured", "group", group, "epoch", ch.Epoch, "reason", string(e.Reason), "node", e.Node, "members", ch.Members, "joining", ch.Joining)
	}
	return ch, events, nil
}

// RunReconciler reconciles group whenever a node's registration or the
// chain changes, and every interval besides, until ctx ends. Every node
// may run one: the compare-and-swap makes concurrent ones safe.
func (c *Control) RunReconciler(ctx context.Context, group string, interval time.Duration) error {
	wn := c.Client.Watch(ctx, c.prefix()+"nodes/", clientv3.WithPrefix())
	wc := c.Client.Watch(ctx, c.ChainKey(group))
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, _, err := c.Reconcile(ctx, group); err != nil && !errors.Is(err, ErrNoChain) && ctx.Err() == nil {
			c.log().Warn("reconcile", "group", group, "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wn:
		case <-wc:
		case <-t.C:
		}
	}
}

// WatchChain sends group's configuration on the returned channel: the
// current one (once it exists) and every later one, in epoch order, until
// ctx ends. Slow receivers see only the latest.
func (c *Control) WatchChain(ctx context.Context, group string) <-chan Chain {
	out := make(chan Chain, 1)
	go func() {
		defer close(out)
		var last uint64
		send := func(ch Chain) {
			if ch.Epoch <= last {
				return
			}
			last = ch.Epoch
			select {
			case <-out: // drop the stale one
			default:
			}
			out <- ch
		}
		for ctx.Err() == nil {
			resp, err := c.Client.Get(ctx, c.ChainKey(group))
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if len(resp.Kvs) > 0 {
				if ch, err := DecodeChain(resp.Kvs[0].Value); err == nil {
					send(ch)
				}
			}
			w := c.Client.Watch(ctx, c.ChainKey(group), clientv3.WithRev(resp.Header.Revision+1))
			for wr := range w {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					if ev.Type != clientv3.EventTypePut {
						continue
					}
					if ch, err := DecodeChain(ev.Kv.Value); err == nil {
						send(ch)
					}
				}
			}
		}
	}()
	return out
}

// ShardMapKey is the etcd key of the cluster's shard map.
func (c *Control) ShardMapKey() string { return c.prefix() + "shards" }

// ErrNoShardMap: the cluster has no shard map in etcd yet.
var ErrNoShardMap = errors.New("cluster: no shard map")

// ShardMap returns the cluster's shard map, or ErrNoShardMap.
func (c *Control) ShardMap(ctx context.Context) (ShardMap, error) {
	resp, err := c.Client.Get(ctx, c.ShardMapKey())
	if err != nil {
		return ShardMap{}, fmt.Errorf("cluster: get shard map: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return ShardMap{}, ErrNoShardMap
	}
	return DecodeShardMap(resp.Kvs[0].Value)
}

// CreateShardMap writes m as the cluster's shard map unless it has one,
// and returns the map in force. The put is one transaction conditional
// on the key not existing, so two nodes setting up the same cluster agree
// on the first writer's map.
func (c *Control) CreateShardMap(ctx context.Context, m ShardMap) (ShardMap, error) {
	b, err := EncodeShardMap(m)
	if err != nil {
		return ShardMap{}, err
	}
	key := c.ShardMapKey()
	if _, err := c.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).
		Commit(); err != nil {
		return ShardMap{}, fmt.Errorf("cluster: create shard map: %w", err)
	}
	return c.ShardMap(ctx)
}

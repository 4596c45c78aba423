package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
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
//	shards          ShardMap (JSON), changed only by compare-and-swap
//	shardacks/<id>  the shard map version node id enforces, on its lease
//	load/<id>       NodeLoad (JSON), node id's write counters, on its lease
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

// Dial returns a Control on the etcd cluster at endpoints, under prefix
// ("" is DefaultPrefix). The caller closes it (Close) when done.
func Dial(endpoints []string, prefix string) (*Control, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	return &Control{Client: cli, Prefix: prefix}, nil
}

// Close closes the Control's etcd client.
func (c *Control) Close() error { return c.Client.Close() }

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

// Put writes key=value on the registration's lease: it disappears with
// the node.
func (r *Registration) Put(ctx context.Context, key, value string) error {
	if _, err := r.session.Client().Put(ctx, key, value, clientv3.WithLease(r.session.Lease())); err != nil {
		return fmt.Errorf("cluster: put %s: %w", key, err)
	}
	return nil
}

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
	return listDir(ctx, c, "nodes/", "node", decodeJSON[Node])
}

// listDir reads every key below the cluster's dir ("nodes/", ...) with
// decode, by its name there (a node's ID); what names a key's value in
// errors.
func listDir[T any](ctx context.Context, c *Control, dir, what string, decode func([]byte) (T, error)) (map[string]T, error) {
	resp, err := c.Client.Get(ctx, c.prefix()+dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("cluster: list %s: %w", dir, err)
	}
	out := make(map[string]T, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		v, err := decode(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("cluster: %s %s: %w", what, kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), c.prefix()+dir)] = v
	}
	return out, nil
}

func decodeJSON[T any](b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
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
	return casUpdate(ctx, c, c.ChainKey(group), func(ctx context.Context) (Chain, []byte, error) { return c.chainRaw(ctx, group) },
		func(cur Chain) (Chain, bool, error) {
			next, write, err := fn(cur.Clone())
			if err == nil && write && (next.Epoch != cur.Epoch+1 || next.Group != cur.Group) {
				err = fmt.Errorf("cluster: chain %s: change from epoch %d must have epoch %d, has %d", group, cur.Epoch, cur.Epoch+1, next.Epoch)
			}
			return next, write, err
		}, EncodeChain)
}

// casUpdate is the compare-and-swap loop of Update and UpdateShardMap:
// read the value (get), compute the next (fn), write it only if the key
// still holds what was read, else start over with the winner's value.
func casUpdate[T any](ctx context.Context, c *Control, key string, get func(context.Context) (T, []byte, error),
	fn func(T) (T, bool, error), encode func(T) ([]byte, error)) (T, bool, error) {
	for {
		cur, raw, err := get(ctx)
		if err != nil {
			return cur, false, err
		}
		next, write, err := fn(cur)
		if err != nil || !write {
			return cur, false, err
		}
		b, err := encode(next)
		if err != nil {
			return cur, false, err
		}
		resp, err := c.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(key), "=", string(raw))).
			Then(clientv3.OpPut(key, string(b))).
			Commit()
		if err != nil {
			return cur, false, fmt.Errorf("cluster: update %s: %w", key, err)
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
	return watchVersioned(ctx, c, c.ChainKey(group), func(b []byte) (Chain, uint64, error) {
		ch, err := DecodeChain(b)
		return ch, ch.Epoch, err
	})
}

// watchVersioned sends the value of key decoded (the current one, once it
// exists, then every later one) in version order until ctx ends; a slow
// receiver sees only the latest.
func watchVersioned[T any](ctx context.Context, c *Control, key string, decode func([]byte) (T, uint64, error)) <-chan T {
	out := make(chan T, 1)
	go func() {
		defer close(out)
		var last uint64
		send := func(b []byte) {
			v, version, err := decode(b)
			if err != nil || version <= last {
				return
			}
			last = version
			select {
			case <-out: // drop the stale one
			default:
			}
			out <- v
		}
		for ctx.Err() == nil {
			resp, err := c.Client.Get(ctx, key)
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if len(resp.Kvs) > 0 {
				send(resp.Kvs[0].Value)
			}
			w := c.Client.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1))
			for wr := range w {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypePut {
						send(ev.Kv.Value)
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
	m, _, err := c.shardMapRaw(ctx)
	return m, err
}

func (c *Control) shardMapRaw(ctx context.Context) (ShardMap, []byte, error) {
	resp, err := c.Client.Get(ctx, c.ShardMapKey())
	if err != nil {
		return ShardMap{}, nil, fmt.Errorf("cluster: get shard map: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return ShardMap{}, nil, ErrNoShardMap
	}
	m, err := DecodeShardMap(resp.Kvs[0].Value)
	return m, resp.Kvs[0].Value, err
}

// UpdateShardMap changes the shard map by fn, atomically, as Update
// changes a chain: one transaction conditional on the stored map being
// the one fn saw, retried on a lost race. fn's map must have the next
// version.
func (c *Control) UpdateShardMap(ctx context.Context, fn func(ShardMap) (ShardMap, bool, error)) (ShardMap, bool, error) {
	return casUpdate(ctx, c, c.ShardMapKey(), c.shardMapRaw, func(cur ShardMap) (ShardMap, bool, error) {
		next, write, err := fn(cur.Clone())
		if err == nil && write && next.Version != cur.Version+1 {
			err = fmt.Errorf("cluster: shard map: change from version %d must have version %d, has %d", cur.Version, cur.Version+1, next.Version)
		}
		return next, write, err
	}, EncodeShardMap)
}

// WatchShardMap sends the shard map (the current one, once it exists,
// then every later one) in version order until ctx ends; a slow receiver
// sees only the latest.
func (c *Control) WatchShardMap(ctx context.Context) <-chan ShardMap {
	return watchVersioned(ctx, c, c.ShardMapKey(), func(b []byte) (ShardMap, uint64, error) {
		m, err := DecodeShardMap(b)
		return m, m.Version, err
	})
}

// ShardAckKey is the etcd key where node id says which shard map version
// it enforces (on the node's lease).
func (c *Control) ShardAckKey(id string) string { return c.prefix() + "shardacks/" + id }

// ShardAcks returns, per live node that acknowledged one, the newest
// shard map version it enforces: it refuses what that map refuses, and
// every write it took under an older map is committed.
func (c *Control) ShardAcks(ctx context.Context) (map[string]uint64, error) {
	return listDir(ctx, c, "shardacks/", "shard ack", func(b []byte) (uint64, error) { return strconv.ParseUint(string(b), 10, 64) })
}

// LoadKey is the etcd key of node id's write counters (on its lease).
func (c *Control) LoadKey(id string) string { return c.prefix() + "load/" + id }

// NodeLoad is a node's write counters, the value of its load/ key: per
// group, the writes it took as head since it started, per shard of the
// map they were routed by (by the shard's start key, hex).
type NodeLoad struct {
	Groups map[string]map[string]uint64 `json:"groups"`
}

// Loads returns every live node's write counters.
func (c *Control) Loads(ctx context.Context) (map[string]NodeLoad, error) {
	return listDir(ctx, c, "load/", "load", decodeJSON[NodeLoad])
}

// Groups returns the groups that have a chain, sorted.
func (c *Control) Groups(ctx context.Context) ([]string, error) {
	resp, err := c.Client.Get(ctx, c.prefix()+"chains/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("cluster: groups: %w", err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, strings.TrimPrefix(string(kv.Key), c.prefix()+"chains/"))
	}
	slices.Sort(out)
	return out, nil
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

package chain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nearstore/nearstore/cluster"
)

// RouterConfig configures a router.
type RouterConfig struct {
	Control *cluster.Control
	Reads   ReadMode
	// AttemptTimeout bounds one try of an operation (see ClientConfig).
	AttemptTimeout time.Duration
}

// Router is a sharded cluster's client: it routes each operation by the
// cluster's shard map (cluster.ShardMap, in etcd) to the group holding
// the key, and within the group as Client does (writes to the head, reads
// by ReadMode, retried through reconfigurations). A Put that returned nil
// is on every member of its group's chain of that moment.
type Router struct {
	cfg     RouterConfig
	shards  cluster.ShardMap
	mu      sync.Mutex
	clients map[string]*Client
}

// NewRouter loads the cluster's shard map. A cluster with no shard map is
// one group: ErrNoShardMap is returned wrapped, and the caller may use a
// Client of that group instead.
func NewRouter(ctx context.Context, cfg RouterConfig) (*Router, error) {
	if cfg.Control == nil {
		return nil, fmt.Errorf("chain: router needs a control plane")
	}
	m, err := cfg.Control.ShardMap(ctx)
	if err != nil {
		return nil, fmt.Errorf("chain: router: %w", err)
	}
	return &Router{cfg: cfg, shards: m, clients: map[string]*Client{}}, nil
}

// ShardMap returns the map the router routes by.
func (r *Router) ShardMap() cluster.ShardMap { return r.shards.Clone() }

// Group returns the client of group, opened on first use.
func (r *Router) Group(ctx context.Context, group string) (*Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clients[group]; ok {
		return c, nil
	}
	c, err := NewClient(ctx, ClientConfig{Control: r.cfg.Control, Group: group, Reads: r.cfg.Reads, AttemptTimeout: r.cfg.AttemptTimeout})
	if err != nil {
		return nil, err
	}
	r.clients[group] = c
	return c, nil
}

// Close closes every group's client.
func (r *Router) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, c := range r.clients {
		errs = append(errs, c.Close())
	}
	r.clients = map[string]*Client{}
	return errors.Join(errs...)
}

// Stats sums the read counters of every group's client.
func (r *Router) Stats() ClientStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s ClientStats
	for _, c := range r.clients {
		cs := c.Stats()
		s.Reads += cs.Reads
		s.ReadsAtTail += cs.ReadsAtTail
		s.DirtyRedirects += cs.DirtyRedirects
		s.Retries += cs.Retries
	}
	return s
}

func (r *Router) forKey(ctx context.Context, key []byte) (*Client, error) {
	return r.Group(ctx, r.shards.Group(key))
}

// Put writes key=value through the chain of key's group.
func (r *Router) Put(ctx context.Context, key, value []byte) error {
	c, err := r.forKey(ctx, key)
	if err != nil {
		return err
	}
	return c.Put(ctx, key, value)
}

// Delete deletes key through the chain of key's group.
func (r *Router) Delete(ctx context.Context, key []byte) error {
	c, err := r.forKey(ctx, key)
	if err != nil {
		return err
	}
	return c.Delete(ctx, key)
}

// Get reads key in its group.
func (r *Router) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	c, err := r.forKey(ctx, key)
	if err != nil {
		return nil, false, err
	}
	return c.Get(ctx, key)
}

// Scan returns the live keys in [start, end) (end nil: no bound) in key
// order, at most limit of them (limit <= 0: all): each shard overlapping
// the range is scanned at its group's tail, in key order.
func (r *Router) Scan(ctx context.Context, start, end []byte, limit int) ([]KV, error) {
	var out []KV
	for i := r.shards.Lookup(start); i < len(r.shards.Shards); i++ {
		s := r.shards.Shards[i]
		if end != nil && bytes.Compare(s.Start, end) >= 0 {
			break
		}
		from, to := start, end
		if bytes.Compare(s.Start, from) > 0 {
			from = s.Start
		}
		if len(s.End) > 0 && (to == nil || bytes.Compare(s.End, to) < 0) {
			to = s.End
		}
		c, err := r.Group(ctx, s.Group)
		if err != nil {
			return out, err
		}
		want := 0
		if limit > 0 {
			want = limit - len(out)
		}
		kvs, err := c.Scan(ctx, from, to, want)
		out = append(out, kvs...)
		if err != nil {
			return out, err
		}
		if limit > 0 && len(out) >= limit {
			return out[:limit], nil
		}
	}
	return out, nil
}

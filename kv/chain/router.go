package chain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
// by ReadMode, retried through reconfigurations). A node refuses a key
// its group does not serve under its map (codes.OutOfRange: the range
// moved, or is frozen while it moves); the router then reloads the map
// and tries again until its context ends, so a write to a moving range
// waits for the move and goes to the range's new group. A Put that
// returned nil is on every member of its group's chain of that moment.
type Router struct {
	cfg     RouterConfig
	mapMu   sync.Mutex
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
func (r *Router) ShardMap() cluster.ShardMap {
	r.mapMu.Lock()
	defer r.mapMu.Unlock()
	return r.shards.Clone()
}

// reload reads the shard map again from etcd (keeping a newer one).
func (r *Router) reload(ctx context.Context) error {
	m, err := r.cfg.Control.ShardMap(ctx)
	if err != nil {
		return err
	}
	r.mapMu.Lock()
	defer r.mapMu.Unlock()
	if m.Version > r.shards.Version {
		r.shards = m
	}
	return nil
}

// routed runs op on the client of key's group, reloading the map and
// trying again while a node answers that the key is not its group's.
func (r *Router) routed(ctx context.Context, key []byte, op func(*Client) error) error {
	backoff := 10 * time.Millisecond
	for {
		r.mapMu.Lock()
		g := r.shards.Group(key)
		r.mapMu.Unlock()
		c, err := r.Group(ctx, g)
		if err != nil {
			return err
		}
		opErr := op(c)
		if status.Code(opErr) != codes.OutOfRange {
			return opErr
		}
		if err := sleepCtx(ctx, backoff); err != nil {
			return fmt.Errorf("chain: %w (last error: %v)", err, opErr)
		}
		backoff = min(2*backoff, 200*time.Millisecond)
		if err := r.reload(ctx); err != nil && ctx.Err() != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

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

// Put writes key=value through the chain of key's group.
func (r *Router) Put(ctx context.Context, key, value []byte) error {
	return r.routed(ctx, key, func(c *Client) error { return c.Put(ctx, key, value) })
}

// Delete deletes key through the chain of key's group.
func (r *Router) Delete(ctx context.Context, key []byte) error {
	return r.routed(ctx, key, func(c *Client) error { return c.Delete(ctx, key) })
}

// Get reads key in its group.
func (r *Router) Get(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	err = r.routed(ctx, key, func(c *Client) error {
		value, found, err = c.Get(ctx, key)
		return err
	})
	return value, found, err
}

// Scan returns the live keys in [start, end) (end nil: no bound) in key
// order, at most limit of them (limit <= 0: all): each shard overlapping
// the range is scanned at its group's tail, in key order; a shard whose
// group refuses it (moved) is scanned again by the reloaded map.
func (r *Router) Scan(ctx context.Context, start, end []byte, limit int) ([]KV, error) {
	var out []KV
	from := start
	for {
		var kvs []KV
		var shardEnd []byte
		err := r.routed(ctx, from, func(c *Client) error {
			m := r.ShardMap()
			s := m.Shards[m.Lookup(from)]
			to := end
			shardEnd = s.End
			if len(s.End) > 0 && (to == nil || bytes.Compare(s.End, to) < 0) {
				to = s.End
			}
			want := 0
			if limit > 0 {
				want = limit - len(out)
			}
			var err error
			kvs, err = c.Scan(ctx, from, to, want)
			return err
		})
		out = append(out, kvs...)
		if err != nil {
			return out, err
		}
		if limit > 0 && len(out) >= limit {
			return out[:limit], nil
		}
		if len(shardEnd) == 0 || (end != nil && bytes.Compare(shardEnd, end) >= 0) {
			return out, nil
		}
		from = shardEnd
	}
}

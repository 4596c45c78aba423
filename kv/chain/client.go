package chain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain/chainpb"
)

// ReadMode says where a client sends reads.
type ReadMode int

const (
	// ReadCRRS sends each read to a random member; a replica whose copy
	// of the key is dirty answers so, and the read goes to the tail.
	ReadCRRS ReadMode = iota
	// ReadTail sends every read to the tail (plain chain replication).
	ReadTail
)

// ClientConfig configures a client.
type ClientConfig struct {
	Control *cluster.Control
	Group   string
	Reads   ReadMode
	// AttemptTimeout bounds one try of an operation (default 3s); the
	// caller's context bounds all of them.
	AttemptTimeout time.Duration
}

// ClientStats counts where reads were served.
type ClientStats struct {
	Reads, ReadsAtTail, DirtyRedirects, Retries uint64
}

// Client routes a group's operations: writes to the head, reads by its
// ReadMode, each stamped with the epoch of the configuration it was routed
// by. A node of another epoch refuses; the client then reloads the
// configuration from etcd and tries again, until its context ends. A Put
// that returned nil is on every member of the chain of that moment.
type Client struct {
	cfg ClientConfig

	mu    sync.Mutex
	chain cluster.Chain
	addrs map[string]string
	conns map[string]*grpc.ClientConn

	reads, atTail, dirty, retries atomic.Uint64
}

// NewClient loads the group's configuration.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Control == nil || cfg.Group == "" {
		return nil, fmt.Errorf("chain: client needs a control plane and a group")
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = 3 * time.Second
	}
	c := &Client{cfg: cfg, conns: map[string]*grpc.ClientConn{}}
	if err := c.refresh(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Close closes the client's connections.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.conns {
		cc.Close()
	}
	c.conns = map[string]*grpc.ClientConn{}
	return nil
}

// Stats returns the read counters.
func (c *Client) Stats() ClientStats {
	return ClientStats{Reads: c.reads.Load(), ReadsAtTail: c.atTail.Load(), DirtyRedirects: c.dirty.Load(), Retries: c.retries.Load()}
}

// Chain returns the configuration the client routes by.
func (c *Client) Chain() cluster.Chain {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chain.Clone()
}

func (c *Client) refresh(ctx context.Context) error {
	ch, err := c.cfg.Control.Chain(ctx, c.cfg.Group)
	if err != nil {
		return err
	}
	nodes, err := c.cfg.Control.Nodes(ctx)
	if err != nil {
		return err
	}
	addrs := make(map[string]string, len(nodes))
	for id, n := range nodes {
		addrs[id] = n.Addr
	}
	c.mu.Lock()
	c.chain, c.addrs = ch, addrs
	c.mu.Unlock()
	return nil
}

// stub returns the client for node id and the epoch to stamp.
func (c *Client) stub(id string) (chainpb.ChainClient, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addr, ok := c.addrs[id]
	if !ok {
		return nil, 0, fmt.Errorf("chain: node %s is not registered", id)
	}
	cc, ok := c.conns[addr]
	if !ok {
		var err error
		if cc, err = grpc.NewClient(addr, dialOptions()...); err != nil {
			return nil, 0, err
		}
		c.conns[addr] = cc
	}
	return chainpb.NewChainClient(cc), c.chain.Epoch, nil
}

// retry runs op until it succeeds, fails for good, or ctx ends; between
// tries it reloads the configuration.
func (c *Client) retry(ctx context.Context, op func(ctx context.Context) error) error {
	backoff := 10 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
		err := op(actx)
		cancel()
		if err == nil {
			return nil
		}
		if s, ok := status.FromError(err); ok && (s.Code() == codes.NotFound || s.Code() == codes.InvalidArgument || s.Code() == codes.OutOfRange) {
			return err // OutOfRange: the key is another group's; a Router reloads its map
		}
		if ctx.Err() != nil {
			return fmt.Errorf("chain: %w (last error: %v)", ctx.Err(), err)
		}
		c.retries.Add(1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("chain: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
		if err := c.refresh(ctx); err != nil && !errors.Is(err, context.Canceled) {
			continue
		}
	}
}

// Put writes key=value through the chain.
func (c *Client) Put(ctx context.Context, key, value []byte) error {
	return c.write(ctx, &chainpb.PutRequest{Key: key, Value: value})
}

// Delete deletes key through the chain.
func (c *Client) Delete(ctx context.Context, key []byte) error {
	return c.write(ctx, &chainpb.PutRequest{Key: key, Delete: true})
}

func (c *Client) write(ctx context.Context, req *chainpb.PutRequest) error {
	req.Group = c.cfg.Group
	return c.retry(ctx, func(ctx context.Context) error {
		s, epoch, err := c.stub(c.Chain().Head())
		if err != nil {
			return err
		}
		req.Epoch = epoch
		_, err = s.Put(ctx, req)
		return err
	})
}

// Get reads key: from a random member whose copy is clean (ReadCRRS) or
// from the tail.
func (c *Client) Get(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	c.reads.Add(1)
	err = c.retry(ctx, func(ctx context.Context) error {
		ch := c.Chain()
		if len(ch.Members) == 0 {
			return fmt.Errorf("chain: group %s has no members", ch.Group)
		}
		target := ch.Tail()
		if c.cfg.Reads == ReadCRRS {
			target = ch.Members[rand.IntN(len(ch.Members))]
		}
		for {
			s, epoch, err := c.stub(target)
			if err != nil {
				return err
			}
			r, err := s.Get(ctx, &chainpb.GetRequest{Group: c.cfg.Group, Epoch: epoch, Key: key})
			if err != nil {
				return err
			}
			if r.Dirty && target != ch.Tail() {
				c.dirty.Add(1)
				target = ch.Tail()
				continue
			}
			if target == ch.Tail() {
				c.atTail.Add(1)
			}
			value, found = r.Value, r.Found
			return nil
		}
	})
	return value, found, err
}

// Scan returns the live keys in [start, end) (end nil: no bound) in key
// order, at most limit of them (limit <= 0: all), read at the tail, where
// every write is committed; it pages through MaxScan keys per request.
func (c *Client) Scan(ctx context.Context, start, end []byte, limit int) ([]KV, error) {
	var out []KV
	from := start
	for {
		want := MaxScan
		if limit > 0 {
			want = min(want, limit-len(out))
		}
		var r *chainpb.ScanResponse
		err := c.retry(ctx, func(ctx context.Context) error {
			s, epoch, err := c.stub(c.Chain().Tail())
			if err != nil {
				return err
			}
			r, err = s.Scan(ctx, &chainpb.ScanRequest{Group: c.cfg.Group, Epoch: epoch, Start: from, End: end, Limit: uint32(want)})
			return err
		})
		if err != nil {
			return out, err
		}
		for _, kv := range r.Kvs {
			out = append(out, KV{Key: kv.Key, Value: kv.Value})
		}
		if !r.More || (limit > 0 && len(out) >= limit) || len(r.Kvs) == 0 {
			return out, nil
		}
		// The next page starts just past the last key returned.
		from = append(bytes.Clone(r.Kvs[len(r.Kvs)-1].Key), 0)
	}
}

package chain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain/chainpb"
)

// HostConfig configures a host.
type HostConfig struct {
	// ID is the node's ID in etcd, shared by every group it hosts.
	ID string
	// Addr is the address clients and peers dial (host:port of the
	// listener given to Run).
	Addr string
	// Target, if set, is published with the node's membership
	// (cluster.Node.Target): where its NVMe/TCP target listens.
	Target  string
	Control *cluster.Control
	// LeaseTTL is the node's etcd lease in seconds (default 2).
	LeaseTTL int
	Log      *slog.Logger
}

// Host is one storage node process serving several replication groups:
// one Node (one replica, one Store) per group behind one gRPC server,
// each request dispatched by the group it names. The node registers once
// in etcd, on one lease, listing every group it hosts, so its death takes
// it out of every chain at once.
type Host struct {
	cfg   HostConfig
	log   *slog.Logger
	nodes map[string]*Node

	chainpb.UnimplementedChainServer
}

// NewHost returns a host of nodes, one per group, each with cfg.ID as
// its ID; Run starts it.
func NewHost(cfg HostConfig, nodes ...*Node) (*Host, error) {
	if cfg.ID == "" || cfg.Control == nil || len(nodes) == 0 {
		return nil, fmt.Errorf("chain: host needs an ID, a control plane and at least one node")
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 2
	}
	lg := cfg.Log
	if lg == nil {
		lg = slog.Default()
	}
	h := &Host{cfg: cfg, log: lg.With("node", cfg.ID), nodes: make(map[string]*Node, len(nodes))}
	for _, n := range nodes {
		if n.cfg.ID != cfg.ID {
			return nil, fmt.Errorf("chain: host %s given node %s", cfg.ID, n.cfg.ID)
		}
		if _, dup := h.nodes[n.cfg.Group]; dup {
			return nil, fmt.Errorf("chain: host %s given group %s twice", cfg.ID, n.cfg.Group)
		}
		h.nodes[n.cfg.Group] = n
	}
	return h, nil
}

// Groups returns the hosted groups, sorted.
func (h *Host) Groups() []string {
	gs := make([]string, 0, len(h.nodes))
	for g := range h.nodes {
		gs = append(gs, g)
	}
	slices.Sort(gs)
	return gs
}

// Flow-control windows of every chain connection, fixed: gRPC's dynamic
// windows probe the link with a BDP ping (and a window update before
// it) once per round trip on every connection that gets data, which on
// a chain's short, busy round trips (a Put, a Ship message, an ack) is
// a ping for every few messages, answered by the peer. Fixed windows
// send none. Their size bounds the data in flight, not memory held:
// 1 MiB a stream (a Ship message of up to maxShipBytes of writes and
// more in flight behind it) and 8 MiB a connection, ample on a
// datacenter link.
const (
	streamWindow = 1 << 20
	connWindow   = 8 << 20
)

// serverOptions are a host's gRPC server options.
func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(streamWindow), grpc.StaticConnWindowSize(connWindow)}
}

// dialOptions are the gRPC dial options of every connection to a chain
// node, a client's and a node's to its successor.
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStaticStreamWindowSize(streamWindow), grpc.WithStaticConnWindowSize(connWindow),
	}
}

// errLeaseLost: the node's etcd lease expired while it ran (a long pause,
// a partition from etcd); the cluster may have taken it out already.
var errLeaseLost = errors.New("chain: lease lost")

// Run serves on ln until ctx ends. Each incarnation of the host takes
// each of its nodes out of its group's chain, registers with a lease,
// and has each node follow (and reconcile) its group's chain; each node
// joins through a COPY from its tail. A host that loses its lease stops
// serving every group and starts a new incarnation.
func (h *Host) Run(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := grpc.NewServer(serverOptions()...)
	chainpb.RegisterChainServer(srv, h)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	defer srv.Stop()
	defer func() {
		for _, n := range h.nodes {
			n.closeConns()
		}
	}()
	for {
		err := h.incarnation(ctx, serveErr)
		if !errors.Is(err, errLeaseLost) || ctx.Err() != nil {
			return err
		}
		h.log.Warn("lease lost: leaving the chains and joining again")
	}
}

func (h *Host) incarnation(ctx context.Context, serveErr <-chan error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, n := range h.nodes {
		if err := n.leave(ctx); err != nil {
			return err
		}
	}
	reg, err := h.cfg.Control.Register(ctx, cluster.Node{ID: h.cfg.ID, Addr: h.cfg.Addr, Groups: h.Groups(), Target: h.cfg.Target}, h.cfg.LeaseTTL)
	if err != nil {
		return err
	}
	defer reg.Close()
	// The shard map is read after registering: a mover that does not see
	// this node registered wrote its map before this read.
	m, err := h.cfg.Control.ShardMap(ctx)
	switch {
	case err == nil:
		if err := h.installShards(ctx, reg, m, false); err != nil {
			return err
		}
	case !errors.Is(err, cluster.ErrNoShardMap):
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		for m := range h.cfg.Control.WatchShardMap(ctx) {
			if err := h.installShards(ctx, reg, m, true); err != nil && ctx.Err() == nil {
				h.log.Warn("shard map", "version", m.Version, "err", err)
			}
		}
	}()
	go func() {
		defer wg.Done()
		h.publishLoad(ctx, reg)
	}()
	for _, n := range h.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.follow(ctx)
		}()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-serveErr:
		return fmt.Errorf("chain: serve: %w", err)
	case <-reg.Done():
		return fmt.Errorf("%w: node %s", errLeaseLost, h.cfg.ID)
	}
}

// installShards has every node enforce shard map m, then acknowledges it
// in etcd (cluster.Control.ShardAcks): from then on the host refuses what
// m refuses, and what it took under older maps is committed.
func (h *Host) installShards(ctx context.Context, reg *cluster.Registration, m cluster.ShardMap, fence bool) error {
	for _, n := range h.nodes {
		if err := n.setShards(ctx, m, fence); err != nil {
			return err
		}
	}
	return reg.Put(ctx, h.cfg.Control.ShardAckKey(h.cfg.ID), strconv.FormatUint(m.Version, 10))
}

// publishLoad writes the nodes' write counters to etcd (on the lease)
// every LoadInterval while they change, for the balancer.
func (h *Host) publishLoad(ctx context.Context, reg *cluster.Registration) {
	t := time.NewTicker(LoadInterval)
	defer t.Stop()
	var last []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l := cluster.NodeLoad{Groups: map[string]map[string]uint64{}}
		for g, n := range h.nodes {
			if w := n.shardWrites(); len(w) > 0 {
				l.Groups[g] = w
			}
		}
		b, err := json.Marshal(l)
		if err != nil || bytes.Equal(b, last) {
			continue
		}
		if err := reg.Put(ctx, h.cfg.Control.LoadKey(h.cfg.ID), string(b)); err != nil {
			h.log.Debug("publish load", "err", err)
			continue
		}
		last = b
	}
}

// LoadInterval is how often a host publishes its write counters.
const LoadInterval = time.Second

func (h *Host) node(group string) (*Node, error) {
	n, ok := h.nodes[group]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "chain: node %s does not serve group %q", h.cfg.ID, group)
	}
	return n, nil
}

// Put dispatches to the group's node.
func (h *Host) Put(ctx context.Context, req *chainpb.PutRequest) (*chainpb.PutResponse, error) {
	n, err := h.node(req.Group)
	if err != nil {
		return nil, err
	}
	return n.Put(ctx, req)
}

// Get dispatches to the group's node.
func (h *Host) Get(ctx context.Context, req *chainpb.GetRequest) (*chainpb.GetResponse, error) {
	n, err := h.node(req.Group)
	if err != nil {
		return nil, err
	}
	return n.Get(ctx, req)
}

// Scan dispatches to the group's node.
func (h *Host) Scan(ctx context.Context, req *chainpb.ScanRequest) (*chainpb.ScanResponse, error) {
	n, err := h.node(req.Group)
	if err != nil {
		return nil, err
	}
	return n.Scan(ctx, req)
}

// Ship reads the stream's first message for its group and hands the
// stream, that message first, to the group's node.
func (h *Host) Ship(st chainpb.Chain_ShipServer) error {
	first, err := st.Recv()
	if err != nil {
		return err
	}
	n, err := h.node(first.Group)
	if err != nil {
		return err
	}
	return n.Ship(&peekedShip{Chain_ShipServer: st, first: first})
}

// peekedShip is a Ship stream whose first message was already read.
type peekedShip struct {
	chainpb.Chain_ShipServer
	first *chainpb.ShipMsg
}

func (p *peekedShip) Recv() (*chainpb.ShipMsg, error) {
	if m := p.first; m != nil {
		p.first = nil
		return m, nil
	}
	return p.Chain_ShipServer.Recv()
}

package cluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// EmbedConfig configures StartEmbedded.
type EmbedConfig struct {
	// Dir holds etcd's data (required).
	Dir string
	// ClientAddr and PeerAddr are host:port to listen on; empty picks
	// a free port on 127.0.0.1.
	ClientAddr, PeerAddr string
}

// Embedded is a single-member etcd server running in this process: the
// default control plane of a local cluster. It is a real etcd (raft, a
// bbolt backend, leases, watches), not a stand-in.
type Embedded struct {
	etcd     *embed.Etcd
	endpoint string
}

// StartEmbedded starts etcd and waits until it serves.
func StartEmbedded(ctx context.Context, cfg EmbedConfig) (*Embedded, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("cluster: embedded etcd needs a data directory")
	}
	var err error
	if cfg.ClientAddr == "" {
		if cfg.ClientAddr, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	if cfg.PeerAddr == "" {
		if cfg.PeerAddr, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	ec := embed.NewConfig()
	ec.Name = "nearstore"
	ec.Dir = cfg.Dir
	ec.LogLevel = "error"
	cu := url.URL{Scheme: "http", Host: cfg.ClientAddr}
	pu := url.URL{Scheme: "http", Host: cfg.PeerAddr}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("cluster: start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("cluster: etcd: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("cluster: etcd not ready after 60s")
	}
	return &Embedded{etcd: e, endpoint: cu.String()}, nil
}

// Endpoints returns the client URLs to give clientv3.
func (e *Embedded) Endpoints() []string { return []string{e.endpoint} }

// Close stops etcd.
func (e *Embedded) Close() { e.etcd.Close() }

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("cluster: pick a port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

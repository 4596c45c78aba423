// Package testtarget runs a real nearstore target inside a test: one
// namespace (or a few) on volumes the test owns, served over TCP loopback with the
// function runtimes the test asks for and its own metrics registry. A
// target can be stopped and another started on the same address and
// volume, which is a target restart: the data stays; extent maps,
// functions, grants and reservations go.
package testtarget

import (
	"context"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nearstore/nearstore/internal/metricstest"
	"github.com/nearstore/nearstore/nvme/auth"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

// Config describes the target.
type Config struct {
	// NQN is the subsystem's; Name labels the namespace.
	NQN, Name string
	// Volume backs namespace 1; the test owns and closes it.
	Volume volume.Volume
	// More back namespaces 2, 3, …, each named by its spec; the test owns
	// and closes them.
	More []volume.Volume
	// Namespaces are served after those, given whole: a Key Value
	// namespace with its store. The test owns their backends and stores.
	Namespaces []target.NamespaceConfig
	// Addr is where to listen (default "127.0.0.1:0").
	Addr string
	// Runtimes makes the target's function runtimes, afresh for every
	// start; Stop closes them.
	Runtimes func() ([]sandbox.Runtime, error)
	// Limits bound the target's function calls.
	Limits sandbox.Limits
	// Now is the target's clock for grant leases (default time.Now).
	Now func() time.Time
	// DHCHAP are the DH-HMAC-CHAP secrets of the hosts that must
	// authenticate, by host NQN; DHCHAPHashes and DHCHAPGroups what the
	// target accepts (target.SubsystemConfig).
	DHCHAP       map[string]target.DHCHAPKeys
	DHCHAPHashes []auth.Hash
	DHCHAPGroups []auth.DHGroup
	// Listen, if set, wraps the listener the target serves on: a test
	// that records what crosses its connections.
	Listen func(net.Listener) net.Listener
}

// Target is a running target.
type Target struct {
	t      testing.TB
	cfg    Config
	addr   string
	reg    *prometheus.Registry
	srv    *target.Server
	rts    []sandbox.Runtime
	served chan error
}

// Start starts a target; the test fails if it cannot. The caller stops it
// (Stop), usually in a t.Cleanup.
func Start(t testing.TB, cfg Config) *Target {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	s := &Target{t: t, cfg: cfg, reg: prometheus.NewRegistry(), served: make(chan error, 1)}
	if cfg.Runtimes != nil {
		var err error
		if s.rts, err = cfg.Runtimes(); err != nil {
			t.Fatal(err)
		}
	}
	nss := []target.NamespaceConfig{{Backend: cfg.Volume, Name: cfg.Name}}
	for _, v := range cfg.More {
		nss = append(nss, target.NamespaceConfig{Backend: v, Name: v.String()})
	}
	nss = append(nss, cfg.Namespaces...)
	var err error
	s.srv, err = target.New(target.Config{
		Subsystems: []target.SubsystemConfig{{NQN: cfg.NQN, Namespaces: nss,
			DHCHAP: cfg.DHCHAP, DHCHAPHashes: cfg.DHCHAPHashes, DHCHAPGroups: cfg.DHCHAPGroups}},
		Logger:         slog.New(slog.DiscardHandler),
		Metrics:        target.NewMetrics(s.reg),
		Runtimes:       s.rts,
		FunctionLimits: cfg.Limits,
		Now:            cfg.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	// The port of a stopped target can take a moment to be free again.
	for try := 0; ; try++ {
		if ln, err = net.Listen("tcp", cfg.Addr); err == nil || try == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	if cfg.Listen != nil {
		ln = cfg.Listen(ln)
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s
}

// Addr is where the target listens.
func (s *Target) Addr() string { return s.addr }

// Stop stops the target at once (target.Server.Close) and closes its
// runtimes (again is harmless).
func (s *Target) Stop() {
	_ = s.stop(func(srv *target.Server) error { return srv.Close() })
}

// Shutdown stops the target gracefully (target.Server.Shutdown), closes
// its runtimes, and returns what Shutdown returned.
func (s *Target) Shutdown(ctx context.Context) error {
	return s.stop(func(srv *target.Server) error { return srv.Shutdown(ctx) })
}

func (s *Target) stop(how func(*target.Server) error) error {
	if s.srv == nil {
		return nil
	}
	err := how(s.srv)
	<-s.served
	for _, rt := range s.rts {
		rt.Close(context.Background())
	}
	s.srv = nil
	return err
}

// Restart stops the target and starts a new one on the same address and
// volume, returning it.
func (s *Target) Restart() *Target {
	s.t.Helper()
	s.Stop()
	cfg := s.cfg
	cfg.Addr = s.addr
	return Start(s.t, cfg)
}

// Registry is the target's own metrics registry.
func (s *Target) Registry() *prometheus.Registry { return s.reg }

// Metric sums the target metric name's samples whose labels include want.
func (s *Target) Metric(name string, want map[string]string) float64 {
	s.t.Helper()
	return metricstest.Sum(s.t, s.reg, name, want)
}

// LeakCheck notes the goroutines running now and returns a check that
// fails the test unless, within a few seconds, no more are running: call
// it after everything the test started (targets, hosts) is stopped.
// Tests that use it must not run in parallel with others.
func LeakCheck(t testing.TB) (check func()) {
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Fatalf("%d goroutines running, %d before the test:\n%s", runtime.NumGoroutine(), before, buf)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Server is the running target's server, for what runs in the target's
// process (an offload engine admitting its direct I/O through the grants).
func (s *Target) Server() *target.Server { return s.srv }

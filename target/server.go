package target

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/auth"
	"github.com/nearstore/nearstore/nvme/tcp"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// Backend is the block store behind a namespace. volume.Volume satisfies it.
//
// Every backend must be safe for concurrent use, and may block: each
// command then runs on a goroutine of its own. A backend that also has a
// method InMemory() bool returning true promises that ReadAt and WriteAt
// never wait for a device (volume's mem volumes do); the target then runs
// its small reads and writes on the connection's reader goroutine instead.
type Backend interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
	BlockSize() int
	Flush() error
	WriteZeroes(off, n int64) error
	Deallocate(off, n int64) error
}

// NamespaceConfig is one namespace of a subsystem.
type NamespaceConfig struct {
	// ID is the NSID, 1-based; zero assigns the next free one.
	ID uint32
	// Backend stores the data.
	Backend Backend
	// Name identifies the backend (its volume spec) and feeds the namespace's
	// stable NGUID and UUID: the same subsystem, NSID and name always give
	// the same identifiers, across restarts. A backend whose bytes live
	// only as long as the object (a mem or sim volume, with an Instance
	// method) adds its instance, so only the same object gives them again.
	Name string
	// KV, if set, makes this a Key Value namespace (command set 01h)
	// served by KV, which keeps its data on Backend; hosts cannot read or
	// write Backend's blocks (cmds_kv.go).
	KV KVStore
}

// SubsystemConfig is one NVM subsystem.
type SubsystemConfig struct {
	NQN        string
	Namespaces []NamespaceConfig
	// Model is reported in Identify Controller; default "nearstore".
	Model string
	// AllowedHosts are the host NQNs that may connect (Linux nvmet's
	// allowed_hosts, SPDK's nvmf_subsystem_add_host); AllowAnyHost admits
	// every host (nvmet's attr_allow_any_host). With neither, the
	// subsystem admits any host only while the server listens on loopback
	// addresses alone: Serve refuses any other listener.
	AllowedHosts []string
	AllowAnyHost bool
	// DHCHAP holds, by host NQN, the DH-HMAC-CHAP secrets of the hosts
	// that must authenticate (target/auth.go); a host without an entry
	// connects unauthenticated, as in nvmet.
	DHCHAP map[string]DHCHAPKeys
	// DHCHAPHashes and DHCHAPGroups are the hash functions and DH groups
	// the controller accepts, in its order of preference: the first one
	// the host also offers is used. Empty: SHA-256, SHA-384, SHA-512 and
	// null, ffdhe2048 … ffdhe8192 (nvmet's defaults are SHA-256 and null).
	DHCHAPHashes []auth.Hash
	DHCHAPGroups []auth.DHGroup
}

// Config configures a Server. Zero values take the defaults noted.
type Config struct {
	Subsystems []SubsystemConfig
	// MaxIOQueues is the number of I/O queues a controller may have
	// (default 16).
	MaxIOQueues int
	// QueueDepth is the maximum entries per queue, CAP.MQES+1 (default 1024).
	QueueDepth int
	// InCapsuleData is the in-capsule data size I/O queues accept (default
	// 16 KiB); the admin queue always accepts 8 KiB, as the Linux host expects.
	InCapsuleData int
	// MaxH2CData is the largest H2CData PDU accepted (default 128 KiB).
	MaxH2CData int
	// C2HChunk is the largest C2HData PDU sent (default 128 KiB): reads
	// longer than this go out in several PDUs.
	C2HChunk int
	// PollSpin bounds how long a queue's reader polls the connection for
	// the host's next PDU before it parks (tcp.PollReader), which spares a
	// queue-depth-1 round trip the reader's wake-up; the spin backs off on
	// a connection whose host keeps it waiting longer. Default
	// tcp.DefaultPollSpin; negative: never poll.
	PollSpin time.Duration
	// MDTS is the maximum data transfer size as a power of two of 4 KiB
	// pages (default 7: 512 KiB), which bounds the memory one command holds.
	MDTS uint8
	// IdleTimeout bounds the time from accept to a completed Fabrics
	// Connect (default 10s).
	IdleTimeout time.Duration
	// MaxIdle is the keep-alive timeout of a controller whose host asked
	// for none (KATO 0): with no command for this long, it goes, as Linux
	// nvmet's discovery controllers do after 120 s (default 2m).
	MaxIdle time.Duration
	// DataTimeout bounds the wait for the data an R2T asked for: a queue
	// whose host has not sent it all by then is closed, and the buffer
	// freed (default 30s).
	DataTimeout time.Duration
	// MaxConnections bounds the open connections (queues) of all hosts
	// (default 4096), and MaxConnectionsPerAddr those from one source IP
	// address (default 512). A connection past either is closed at once.
	MaxConnections        int
	MaxConnectionsPerAddr int
	// MaxFunctionSize bounds the module a Function Load brings (default
	// 4 MiB).
	MaxFunctionSize int
	// Per host: the functions it may keep loaded (default 64), their
	// modules' bytes (default 64 MiB), and the memory their instances may
	// pin, each function counted at FunctionLimits.MemoryBytes (default
	// 1 GiB). A Function Load past them fails with Metadata Limit.
	MaxFunctionsPerHost      int
	MaxFunctionBytesPerHost  int
	MaxFunctionMemoryPerHost int64
	// MaxFunctionCallsPerHost bounds the function requests of one host
	// running at once, their reads included (default 64); more wait their
	// turn, so that one host's functions cannot take every goroutine the
	// target has. It bounds, and does not schedule, their CPU (FunctionWorkers
	// does).
	MaxFunctionCallsPerHost int
	// FunctionWorkers is how many function steps may run at once, of
	// all hosts (default GOMAXPROCS-1, at least 1). Function code holds
	// its OS thread until it returns, so it must stay below GOMAXPROCS
	// for the other Ps to serve plain I/O; the steps waiting for a slot
	// are served by least CPU used per host (funcScheduler).
	FunctionWorkers int
	// FunctionSlice is how long a step may keep its slot while another
	// waits, at the points where it can yield (default 1 ms): between
	// pushdown steps, and within the eBPF interpreter.
	FunctionSlice time.Duration
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Metrics, when not nil, receives per-command metrics.
	Metrics *Metrics
	// Runtimes run the functions hosts load (sandbox/wasm, sandbox/ebpf).
	// Without any, Function Load is refused.
	Runtimes []sandbox.Runtime
	// FunctionLimits bound every function call (zero: sandbox defaults).
	FunctionLimits sandbox.Limits
	// MaxExtentMaps bounds the extent-map entries (removals included) one
	// host may keep on one namespace (default 1<<20), and
	// MaxExtentMapExtents their extents in all (default 1<<22, 64 MiB of
	// extents). Extent Map Puts beyond them fail with Metadata Limit.
	MaxExtentMaps       int
	MaxExtentMapExtents int
	// MaxGrants bounds the grants on one namespace, and the hosts ever
	// granted anything on it (default 4096).
	MaxGrants int
	// HostStateLease is how long the target keeps what a host told it —
	// its extent maps, its functions — after the host's last controller
	// has gone (default 10m). A host back within the lease finds it all;
	// after it, the host puts its maps and loads its functions again, as
	// after a target restart.
	HostStateLease time.Duration
	// Now is the clock grant leases run by (default time.Now); tests
	// inject their own.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.MaxIOQueues <= 0 {
		c.MaxIOQueues = 16
	}
	if c.QueueDepth <= 0 {
		c.QueueDepth = 1024
	}
	if c.InCapsuleData <= 0 {
		c.InCapsuleData = 16 << 10
	}
	if c.MaxH2CData <= 0 {
		c.MaxH2CData = 128 << 10
	}
	if c.C2HChunk <= 0 {
		c.C2HChunk = 128 << 10
	}
	if c.PollSpin == 0 {
		c.PollSpin = tcp.DefaultPollSpin
	}
	if c.MDTS == 0 {
		c.MDTS = 7
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 10 * time.Second
	}
	if c.MaxIdle <= 0 {
		c.MaxIdle = 2 * time.Minute
	}
	if c.DataTimeout <= 0 {
		c.DataTimeout = 30 * time.Second
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = 4096
	}
	if c.MaxConnectionsPerAddr <= 0 {
		c.MaxConnectionsPerAddr = 512
	}
	if c.MaxFunctionSize <= 0 {
		c.MaxFunctionSize = 4 << 20
	}
	if c.HostStateLease <= 0 {
		c.HostStateLease = 10 * time.Minute
	}
	if c.MaxFunctionsPerHost <= 0 {
		c.MaxFunctionsPerHost = 64
	}
	if c.MaxFunctionBytesPerHost <= 0 {
		c.MaxFunctionBytesPerHost = 64 << 20
	}
	if c.MaxFunctionMemoryPerHost <= 0 {
		c.MaxFunctionMemoryPerHost = 1 << 30
	}
	if c.MaxFunctionCallsPerHost <= 0 {
		c.MaxFunctionCallsPerHost = 64
	}
	if c.FunctionWorkers <= 0 {
		c.FunctionWorkers = defaultFuncWorkers()
	}
	if c.FunctionSlice <= 0 {
		c.FunctionSlice = time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxExtentMaps <= 0 {
		c.MaxExtentMaps = 1 << 20
	}
	if c.MaxExtentMapExtents <= 0 {
		c.MaxExtentMapExtents = 1 << 22
	}
	if c.MaxGrants <= 0 {
		c.MaxGrants = 4096
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// adminInCapsuleData is the in-capsule data the admin queue accepts: the
// Linux host sends up to 8 KiB in-capsule on it without asking.
const adminInCapsuleData = 8 << 10

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("target: server closed")

// Server is an NVMe/TCP target.
type Server struct {
	cfg     Config
	log     *slog.Logger
	subsys  map[string]*subsystem
	order   []*subsystem // configuration order, for the discovery log
	metrics *Metrics

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	perAddr   map[string]int // open connections by source IP
	closing   atomic.Bool
	done      chan struct{}
	// ctx is every queue's parent context: cancel ends every command
	// still running, when Shutdown's grace period is over.
	ctx    context.Context
	cancel context.CancelFunc
	cmds   commandSets

	// inflight counts commands executing, so Shutdown can wait for them.
	inflight tracker
	bufs     bufPool
	reqs     requestPool // requests recycled, their buffers from bufs
	disc     *subsystem
	funcs    *functionTable
	calls    *callLimiter
	sched    *funcScheduler
	exec     *pushdown.Executor
	warm     *warmStacks // where commands that may block run (warmstacks.go)
	// readers counts the connections' reader goroutines, teardown
	// included; Shutdown waits for them, not for the commands they
	// started.
	readers sync.WaitGroup

	// metas holds the extent maps and grants hosts put on namespaces,
	// created on a namespace's first Put.
	metaMu sync.RWMutex
	metas  map[*namespace]*nsMeta
	// restricted counts the task hosts on every namespace (grants.go);
	// while it is zero, commands skip the grant check altogether.
	restricted atomic.Int64

	// present counts each host's controllers on NVM subsystems; a host
	// whose count drops to zero has its state dropped after
	// HostStateLease unless it comes back (forgetHost).
	hostsMu sync.Mutex
	present map[string]*hostPresence
}

// hostPresence is one host's controllers, and the timer that forgets it
// while it has none.
type hostPresence struct {
	ctrls int
	timer *time.Timer
	gen   uint64 // which lease timer is current
}

// hostUp counts a new controller of host.
func (s *Server) hostUp(host string) {
	s.hostsMu.Lock()
	defer s.hostsMu.Unlock()
	p := s.present[host]
	if p == nil {
		p = &hostPresence{}
		s.present[host] = p
	}
	p.ctrls++
	p.gen++
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

// hostDown counts a controller of host gone, and starts its lease when it
// was the last.
func (s *Server) hostDown(host string) {
	s.hostsMu.Lock()
	defer s.hostsMu.Unlock()
	p := s.present[host]
	if p == nil {
		return
	}
	if p.ctrls--; p.ctrls > 0 {
		return
	}
	p.gen++
	gen := p.gen
	p.timer = time.AfterFunc(s.cfg.HostStateLease, func() { s.forgetHost(host, gen) })
}

// forgetHost drops the state of a host whose lease (of generation gen)
// ran out while it had no controller: its extent maps on every namespace,
// and its ownership of functions.
func (s *Server) forgetHost(host string, gen uint64) {
	s.hostsMu.Lock()
	p := s.present[host]
	if p == nil || p.ctrls > 0 || p.gen != gen {
		s.hostsMu.Unlock()
		return // back meanwhile, or already forgotten
	}
	delete(s.present, host)
	s.hostsMu.Unlock()
	s.metaMu.RLock()
	for ns, m := range s.metas {
		m.mu.Lock()
		mt := m.tables[host]
		delete(m.tables, host)
		m.mu.Unlock()
		if mt != nil {
			mt.mu.RLock()
			d := mapDelta{live: -mt.live, extents: -mt.extents}
			mt.mu.RUnlock()
			s.metrics.mapsChanged(m.ssNQN, ns.id, d)
		}
	}
	s.metaMu.RUnlock()
	s.funcs.forget(context.Background(), host)
	s.sched.forget(host)
	s.log.Info("host gone past its lease: its extent maps and functions are dropped", "host", host, "lease", s.cfg.HostStateLease)
}

// New checks cfg and builds a server. It does not listen.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if cfg.QueueDepth < 2 || cfg.QueueDepth > 65536 {
		return nil, fmt.Errorf("target: queue depth %d outside [2, 65536]", cfg.QueueDepth)
	}
	if cfg.MaxFunctionSize > maxModuleSize {
		return nil, fmt.Errorf("target: function size limit %d too large (max %d)", cfg.MaxFunctionSize, maxModuleSize)
	}
	if cfg.MDTS > 12 {
		return nil, fmt.Errorf("target: MDTS %d too large (max 12: 16 MiB)", cfg.MDTS)
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		subsys:    make(map[string]*subsystem),
		metrics:   cfg.Metrics,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
		perAddr:   make(map[string]int),
		present:   make(map[string]*hostPresence),
		done:      make(chan struct{}),
		metas:     make(map[*namespace]*nsMeta),
		cmds:      newCommandSets(),
	}
	s.bufs.metrics = cfg.Metrics
	s.reqs.bufs = &s.bufs
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if len(cfg.Subsystems) == 0 {
		return nil, errors.New("target: no subsystems configured")
	}
	for _, sc := range cfg.Subsystems {
		if err := validNQN(sc.NQN); err != nil {
			return nil, err
		}
		if sc.NQN == nvme.DiscoveryNQN {
			return nil, fmt.Errorf("target: %s is reserved for the discovery controller", sc.NQN)
		}
		if _, dup := s.subsys[sc.NQN]; dup {
			return nil, fmt.Errorf("target: subsystem %s configured twice", sc.NQN)
		}
		ss := newSubsystem(s, sc)
		if err := ss.setAuth(sc); err != nil {
			return nil, err
		}
		for _, nc := range sc.Namespaces {
			if _, err := ss.addNamespace(nc); err != nil {
				return nil, err
			}
		}
		s.subsys[sc.NQN] = ss
		s.order = append(s.order, ss)
	}
	s.disc = newSubsystem(s, SubsystemConfig{NQN: nvme.DiscoveryNQN, Model: "nearstore discovery"})
	s.funcs = newFunctionTable(cfg.Runtimes, cfg.FunctionLimits, functionQuota{
		count: cfg.MaxFunctionsPerHost, bytes: cfg.MaxFunctionBytesPerHost, memory: cfg.MaxFunctionMemoryPerHost,
	})
	s.calls = newCallLimiter(cfg.MaxFunctionCallsPerHost)
	s.sched = newFuncScheduler(cfg.FunctionWorkers, cfg.FunctionSlice, cfg.Metrics)
	s.funcs.sched = s.sched
	s.exec = &pushdown.Executor{Limits: cfg.FunctionLimits}
	s.warm = newWarmStacks(s.ctx)
	return s, nil
}

func validNQN(nqn string) error {
	if nqn == "" || len(nqn) > 223 {
		return fmt.Errorf("target: NQN %q must be 1 to 223 bytes", nqn)
	}
	return nil
}

// AddNamespace adds a namespace to a running subsystem and tells connected
// hosts with a Namespace Attribute Changed event. It returns the NSID.
func (s *Server) AddNamespace(nqn string, nc NamespaceConfig) (uint32, error) {
	ss, ok := s.subsys[nqn]
	if !ok {
		return 0, fmt.Errorf("target: no subsystem %s", nqn)
	}
	id, err := ss.addNamespace(nc)
	if err != nil {
		return 0, err
	}
	ss.namespaceChanged(id)
	return id, nil
}

// ListenAndServe listens on addr and serves until Shutdown or Close.
func (s *Server) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln until Shutdown or Close. It always
// returns a non-nil error; after Shutdown or Close, ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		if ln != nil {
			ln.Close()
		}
		return ErrServerClosed
	}
	if open := s.openByDefault(); len(open) > 0 {
		if !isLoopback(ln.Addr()) {
			s.mu.Unlock()
			ln.Close()
			return fmt.Errorf("target: listening on %s, which is not a loopback address, and subsystem %s names no allowed host: "+
				"give it allowed hosts (--allow-host NQN) or admit any host explicitly (--allow-any-host)", ln.Addr(), open[0])
		}
		for _, nqn := range open {
			s.log.Warn("subsystem admits any host: it names no allowed host, and the target listens on loopback only", "subsystem", nqn, "addr", ln.Addr().String())
		}
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	s.log.Info("target listening", "addr", ln.Addr().String(), "subsystems", len(s.order))
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if transientAccept(err) {
				// Out of file descriptors and the like: back off and
				// keep serving the connections there are.
				if delay == 0 {
					s.log.Warn("accept failing: backing off", "err", err)
				}
				s.metrics.error("accept")
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return fmt.Errorf("target: accept: %w", err)
		}
		delay = 0
		src := sourceIP(c.RemoteAddr())
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			c.Close()
			return ErrServerClosed
		}
		if len(s.conns) >= s.cfg.MaxConnections || s.perAddr[src] >= s.cfg.MaxConnectionsPerAddr {
			s.mu.Unlock()
			s.log.Debug("connection refused: over the connection limit", "remote", c.RemoteAddr().String())
			s.metrics.error("connection_limit")
			c.Close()
			continue
		}
		q := newConn(s, c)
		s.conns[q] = struct{}{}
		s.perAddr[src]++
		s.readers.Add(1)
		s.mu.Unlock()
		s.metrics.connOpened()
		go func() {
			defer s.readers.Done()
			q.serve()
			s.mu.Lock()
			delete(s.conns, q)
			if s.perAddr[src]--; s.perAddr[src] <= 0 {
				delete(s.perAddr, src)
			}
			s.mu.Unlock()
			s.metrics.connClosed()
		}()
	}
}

// openByDefault lists the subsystems that name no allowed host and do not
// admit any host explicitly.
func (s *Server) openByDefault() []string {
	var open []string
	for _, ss := range s.order {
		if !ss.allowAny && len(ss.allowed) == 0 {
			open = append(open, ss.nqn)
		}
	}
	return open
}

// isLoopback reports whether a listener's address is a loopback one.
func isLoopback(a net.Addr) bool {
	var ip net.IP
	if ta, ok := a.(*net.TCPAddr); ok {
		ip = ta.IP
	} else if host, _, err := net.SplitHostPort(a.String()); err == nil {
		ip = net.ParseIP(host)
	}
	return ip != nil && ip.IsLoopback()
}

// transientAccept reports an accept error that passes: a timeout, or the
// process or system out of file descriptors or buffers, or a connection
// that went before it was accepted.
func transientAccept(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// sourceIP is the IP address a connection comes from, the key of the
// per-address connection limit.
func sourceIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// Shutdown stops the server gracefully: it stops accepting, stops reading
// new commands, lets the commands already executing finish and send their
// completions, closes every connection and flushes every namespace. If ctx
// ends first, the grace period is over: the commands still running are
// cancelled (a storage function stops; a backend call, which cannot be
// interrupted, finishes on its own and its completion goes nowhere), the
// remaining connections are closed at once without waiting for those
// commands, and ctx's error is returned (volumes are still flushed).
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.closing.CompareAndSwap(false, true) {
		<-s.done
		return nil
	}
	defer close(s.done)
	s.mu.Lock()
	for ln := range s.listeners {
		ln.Close()
	}
	qs := make([]*conn, 0, len(s.conns))
	for q := range s.conns {
		qs = append(qs, q)
	}
	s.mu.Unlock()
	for _, q := range qs {
		q.stopReading()
	}
	// Readers first: a reader finishes the input it has buffered, running
	// some commands itself, and flushes their completions before it stops.
	// Only then is inflight sure to grow no more.
	var err error
	for _, q := range qs {
		select {
		case <-q.readerDone:
		case <-ctx.Done():
		}
	}
	select {
	case <-s.inflight.idle():
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	s.cancel()
	for _, q := range qs {
		q.close()
	}
	s.readers.Wait()
	for _, ss := range s.order {
		if ferr := ss.flushAll(); ferr != nil && err == nil {
			err = ferr
		}
	}
	s.funcs.close(context.Background())
	s.log.Info("target stopped")
	return err
}

// Close stops the server at once: in-flight commands are cancelled and not
// waited for.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Shutdown(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// stableID derives a namespace's NGUID/UUID from what names it, so hosts
// see the same identifiers every time the same configuration is served.
func stableID(parts ...string) [16]byte {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var id [16]byte
	copy(id[:], h.Sum(nil))
	id[6] = id[6]&0x0f | 0x50 // RFC 4122 version 5 layout
	id[8] = id[8]&0x3f | 0x80
	return id
}

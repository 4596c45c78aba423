package host

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nearstore/nearstore/nvme/auth"
	"github.com/nearstore/nearstore/nvme/tcp"
)

// ErrConnectionLost is wrapped by the error of every command that was in
// flight when its connection broke, and by submissions that waited longer
// than Options.MaxReconnectWait for a new connection. Whether such a command
// executed is unknown.
var ErrConnectionLost = errors.New("host: connection to controller lost")

// ErrNamespaceChanged is wrapped by the error of every command sent
// through a Namespace handle whose NSID, after a reconnect, names a
// namespace with other identifiers (NGUID or UUID) or another block size:
// a different volume, such as another target now listening at the same
// address, or a RAM volume served again empty. Sending the handle's
// commands there would read and overwrite a volume that is not the one it
// was opened on, so they are refused (Linux drops such a namespace too).
// Controller.Namespace returns a handle to the new namespace.
var ErrNamespaceChanged = errors.New("host: namespace changed identity")

// ErrAuthentication is wrapped by the error of a Connect (or reconnect)
// whose DH-HMAC-CHAP authentication failed: the controller refused this
// host's response (a wrong or missing DHCHAPSecret), the controller's own
// response did not match DHCHAPCtrlSecret, or the controller requires
// authentication and the host has no secret. The *auth.Error it also
// wraps, if any, carries the reason code. Retrying with the same secrets
// fails the same way.
var ErrAuthentication = errors.New("host: authentication failed")

// ErrClosed is returned by every operation on a Controller after Close, and
// wrapped by the error of commands still in flight when Close ran.
var ErrClosed = errors.New("host: controller closed")

// Defaults for Options fields left zero.
const (
	DefaultQueueDepth       = 128
	DefaultKeepAlive        = 10 * time.Second
	DefaultDialTimeout      = 5 * time.Second
	DefaultReconnectDelay   = 200 * time.Millisecond
	DefaultMaxReconnectWait = 30 * time.Second
	// DefaultControllerLossTimeout is Linux's default ctrl_loss_tmo.
	DefaultControllerLossTimeout = 10 * time.Minute
	// maxReconnectDelay caps the exponential reconnect backoff.
	maxReconnectDelay = 5 * time.Second
	// adminDepth is the admin queue's size (SQSIZE 31), as in Linux.
	adminDepth = 32
	// adminInline is the in-capsule data the admin queue accepts: the
	// NVMe/TCP binding requires 8 KiB (Linux's NVME_TCP_ADMIN_CCSZ).
	adminInline = 8192
)

// Options configure Connect and Discover. The zero value is usable.
type Options struct {
	// HostNQN identifies the host. Default:
	// "nqn.2014-08.org.nvmexpress:uuid:<uuid>", with the UUID being HostID.
	HostNQN string
	// HostID is the 16-byte host identifier. Default: random per Connect
	// (kept across reconnections, so the target sees the same host).
	HostID [16]byte
	// IOQueues is the number of I/O queues, each its own TCP connection.
	// Default 1; fewer may be granted by the controller.
	IOQueues int
	// QueueDepth is the number of commands each I/O queue keeps in flight.
	// Default 128, capped by the controller's CAP.MQES. The queue is created
	// with QueueDepth+1 entries, because a submission queue of N entries is
	// full at N-1 commands.
	QueueDepth int
	// HeaderDigest and DataDigest request CRC32C digests; the controller
	// may refuse them, in which case they are off.
	HeaderDigest bool
	DataDigest   bool
	// DisableSQFlowControl asks the controller, in every Connect, to
	// disable submission queue flow control (CATTR bit 2), as Linux's
	// disable_sqflow option does. Controllers may then elide the
	// CapsuleResp of a successful read (C2HData SUCCESS flag).
	DisableSQFlowControl bool
	// KeepAlive is the keep-alive timeout (KATO) sent in Connect; the host
	// sends a Keep Alive command every KeepAlive/2. Default 10 s; negative
	// disables keep-alive (KATO 0).
	KeepAlive time.Duration
	// DialTimeout bounds each TCP dial and connection setup. Default 5 s.
	DialTimeout time.Duration
	// ReconnectDelay is the first wait before reconnecting after a
	// connection loss; it doubles on each failure up to 5 s. Default 200 ms.
	ReconnectDelay time.Duration
	// MaxReconnectWait bounds how long a submission waits for a reconnect
	// before failing with ErrConnectionLost. Default 30 s.
	MaxReconnectWait time.Duration
	// ControllerLossTimeout is how long the controller keeps reconnecting
	// after a connection loss before giving up, as Linux's ctrl_loss_tmo:
	// from then on every submission fails at once with ErrConnectionLost,
	// and only Close is left to do. Default 10 minutes; negative: never
	// give up.
	ControllerLossTimeout time.Duration
	// DHCHAPSecret is this host's DH-HMAC-CHAP secret in the DHHC-1 form
	// of `nvme gen-dhchap-key` ("DHHC-1:00:<base64>:"). With it the host
	// authenticates every queue (admin and I/O) the controller asks to
	// authenticate (Connect's AUTHREQ), as the Linux host does. Empty: a
	// controller that requires authentication refuses the host
	// (ErrAuthentication).
	DHCHAPSecret string
	// DHCHAPCtrlSecret, with DHCHAPSecret, asks for bidirectional
	// authentication: the controller must prove it holds this secret too,
	// and the host authenticates every queue even if the controller did
	// not ask to. Empty: the controller is not authenticated.
	DHCHAPCtrlSecret string
	// DHCHAPHashes and DHCHAPGroups restrict what the host offers in
	// AUTH_Negotiate, in order of preference; the controller picks. Empty:
	// every hash (SHA-256, SHA-384, SHA-512) and every group (null,
	// ffdhe2048 … ffdhe8192), in the Linux host's order.
	DHCHAPHashes []auth.Hash
	DHCHAPGroups []auth.DHGroup
	// Logger receives connection and reconnection events. Default: discard.
	Logger *slog.Logger
	// PollSpin bounds how long a queue's reader polls the connection
	// before it parks while commands are in flight (tcp.PollReader), which
	// spares a queue-depth-1 round trip the reader's wake-up. Default
	// tcp.DefaultPollSpin; negative: never poll.
	PollSpin time.Duration
}

// withDefaults fills zero fields. It generates the host identity once, so
// every association of a Controller presents the same one.
func (o Options) withDefaults() (Options, error) {
	if o.HostID == ([16]byte{}) {
		if _, err := rand.Read(o.HostID[:]); err != nil {
			return o, fmt.Errorf("host: generating host ID: %w", err)
		}
		// Make it a version 4 UUID, so the NQN below is well formed.
		o.HostID[6] = o.HostID[6]&0x0f | 0x40
		o.HostID[8] = o.HostID[8]&0x3f | 0x80
	}
	if o.HostNQN == "" {
		o.HostNQN = "nqn.2014-08.org.nvmexpress:uuid:" + uuidString(o.HostID)
	}
	if len(o.HostNQN) > 223 {
		return o, fmt.Errorf("host: host NQN is %d bytes, the limit is 223", len(o.HostNQN))
	}
	if o.IOQueues <= 0 {
		o.IOQueues = 1
	}
	if o.IOQueues > 0xfffe {
		return o, fmt.Errorf("host: %d I/O queues requested, at most 65534", o.IOQueues)
	}
	if o.QueueDepth <= 0 {
		o.QueueDepth = DefaultQueueDepth
	}
	if o.QueueDepth > 0xffff {
		o.QueueDepth = 0xffff
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.ReconnectDelay <= 0 {
		o.ReconnectDelay = DefaultReconnectDelay
	}
	if o.MaxReconnectWait <= 0 {
		o.MaxReconnectWait = DefaultMaxReconnectWait
	}
	if o.ControllerLossTimeout == 0 {
		o.ControllerLossTimeout = DefaultControllerLossTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.PollSpin == 0 {
		o.PollSpin = tcp.DefaultPollSpin
	}
	if o.DHCHAPCtrlSecret != "" && o.DHCHAPSecret == "" {
		return o, errors.New("host: DHCHAPCtrlSecret needs DHCHAPSecret: bidirectional authentication authenticates the host too")
	}
	for _, s := range []string{o.DHCHAPSecret, o.DHCHAPCtrlSecret} {
		if s == "" {
			continue
		}
		if _, err := auth.ParseSecret(s); err != nil {
			return o, fmt.Errorf("host: %w", err)
		}
	}
	return o, nil
}

// kato returns the KATO value, in milliseconds, sent in the admin Connect.
func (o *Options) kato() uint32 {
	if o.KeepAlive < 0 {
		return 0
	}
	ms := o.KeepAlive.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	if ms > 0xffffffff {
		ms = 0xffffffff
	}
	return uint32(ms)
}

func uuidString(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Stats are a Controller's counters since Connect.
type Stats struct {
	Commands     uint64 // commands submitted to a queue
	Completions  uint64 // commands completed by the controller (any status)
	Errors       uint64 // commands that completed with a non-success status
	Abandoned    uint64 // commands whose context ended while in flight
	ConnLosses   uint64 // association failures
	Reconnects   uint64 // successful re-associations
	BytesRead    uint64 // controller-to-host data received
	BytesWritten uint64 // host-to-controller data sent
	DroppedDone  uint64 // Calls not delivered because their Done channel was full
}

type stats struct {
	commands, completions, errors, abandoned atomic.Uint64
	connLosses, reconnects                   atomic.Uint64
	bytesRead, bytesWritten, droppedDone     atomic.Uint64
}

func (s *stats) snapshot() Stats {
	return Stats{
		Commands:     s.commands.Load(),
		Completions:  s.completions.Load(),
		Errors:       s.errors.Load(),
		Abandoned:    s.abandoned.Load(),
		ConnLosses:   s.connLosses.Load(),
		Reconnects:   s.reconnects.Load(),
		BytesRead:    s.bytesRead.Load(),
		BytesWritten: s.bytesWritten.Load(),
		DroppedDone:  s.droppedDone.Load(),
	}
}

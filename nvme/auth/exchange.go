package auth

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// ErrFailed is wrapped by every *Error: an authentication transaction that
// ended in failure, on either side.
var ErrFailed = errors.New("auth: DH-HMAC-CHAP authentication failed")

// Error is a failed transaction: the reason code explanation (Reason*)
// the failure message carries, whether the peer reported it (Remote: a
// Failure1 or Failure2 received) or this side found it, and what was
// found.
type Error struct {
	Reason uint8
	Remote bool
	Detail string
}

func (e *Error) Error() string {
	who := "local"
	if e.Remote {
		who = "peer"
	}
	if e.Detail == "" {
		return fmt.Sprintf("auth: %s (%s)", ReasonText(e.Reason), who)
	}
	return fmt.Sprintf("auth: %s (%s): %s", ReasonText(e.Reason), who, e.Detail)
}

// Is makes every *Error match ErrFailed.
func (e *Error) Is(target error) bool { return target == ErrFailed }

func fail(reason uint8, format string, args ...any) *Error {
	return &Error{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// AllHashes and AllGroups are everything this package computes, in the
// order the Linux host offers them.
var (
	AllHashes = []Hash{SHA256, SHA384, SHA512}
	AllGroups = []DHGroup{DHNull, FFDHE2048, FFDHE3072, FFDHE4096, FFDHE6144, FFDHE8192}
)

// seqnum draws a sequence number: any value but 0, which in a Reply means
// "no bidirectional authentication".
func seqnum(r io.Reader) (uint32, error) {
	var b [4]byte
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, err
		}
		if v := binary.LittleEndian.Uint32(b[:]); v != 0 {
			return v, nil
		}
	}
}

func randomBytes(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// Config is one queue's authentication transaction, as either side sees
// it.
type Config struct {
	HostNQN, SubNQN string
	// Secret is the host's secret (both sides know it); CtrlSecret, if
	// set, the controller's, for bidirectional authentication.
	Secret     Secret
	CtrlSecret *Secret
	// Hashes and Groups are what this side will use, in its order of
	// preference: the host offers them, the controller picks the first
	// of its own the host offered. Empty: AllHashes, AllGroups.
	Hashes []Hash
	Groups []DHGroup
	// TID is the transaction ID (the host's; the controller takes the
	// host's).
	TID uint16
	// Rand supplies challenges, sequence numbers and DH keys. Default
	// crypto/rand.
	Rand io.Reader
}

func (c *Config) check() error {
	if c.Rand == nil {
		c.Rand = rand.Reader
	}
	if len(c.Hashes) == 0 {
		c.Hashes = AllHashes
	}
	if len(c.Groups) == 0 {
		c.Groups = AllGroups
	}
	if len(c.Secret.Key) == 0 {
		return fmt.Errorf("%w: no host secret", ErrSecret)
	}
	for _, h := range c.Hashes {
		if h.Size() == 0 {
			return fmt.Errorf("auth: unknown hash %d", h)
		}
	}
	for _, g := range c.Groups {
		if !g.Known() {
			return fmt.Errorf("auth: unknown DH group %d", g)
		}
	}
	return nil
}

// hostKey and ctrlKey are the transformed keys each side's response is
// keyed with: the host's secret for the host NQN, the controller's for
// the subsystem NQN.
func (c *Config) hostKey() ([]byte, error) { return c.Secret.TransformedKey(c.HostNQN) }
func (c *Config) ctrlKey() ([]byte, error) { return c.CtrlSecret.TransformedKey(c.SubNQN) }

// challengeFor is c, augmented with the session key when a DH group is in
// use.
func challengeFor(h Hash, sessionKey, c []byte) ([]byte, error) {
	if sessionKey == nil {
		return c, nil
	}
	return Augment(h, sessionKey, c)
}

// Host is the host side of one queue's DH-HMAC-CHAP transaction, a pure
// state machine: Start gives the AUTH_Negotiate to send (Authentication
// Send), and Step takes each message received (Authentication Receive)
// and gives the one to send next, if any:
//
//	Start            → Negotiate
//	Step(Challenge)  → Reply
//	Step(Success1)   → Success2 (bidirectional) or nil; Done
//
// On a failure Step returns an *Error and, when the host found it, the
// Failure2 to send; a Failure1 received returns the controller's *Error
// and nothing to send. After Done or a failure, Step refuses everything.
type Host struct {
	cfg   Config
	state hostState
	hash  Hash
	group DHGroup
	s1    uint32
	c2    []byte // nil: no bidirectional authentication
	s2    uint32
	skey  []byte // nil: the null group
}

type hostState uint8

const (
	hostStart hostState = iota
	hostAwaitChallenge
	hostAwaitSuccess1
	hostDone
	hostFailed
)

// NewHost starts a transaction.
func NewHost(cfg Config) (*Host, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return &Host{cfg: cfg}, nil
}

// Start returns the AUTH_Negotiate message.
func (h *Host) Start() ([]byte, error) {
	if h.state != hostStart {
		return nil, errors.New("auth: transaction already started")
	}
	h.state = hostAwaitChallenge
	n := Negotiate{TID: h.cfg.TID, Hashes: h.cfg.Hashes, Groups: h.cfg.Groups}
	return n.Marshal()
}

// Done reports whether the transaction succeeded.
func (h *Host) Done() bool { return h.state == hostDone }

// Negotiated is the hash and group the controller chose, once its
// challenge is in.
func (h *Host) Negotiated() (Hash, DHGroup) { return h.hash, h.group }

// Step takes a message from the controller and returns the message to
// send next (nil: none).
func (h *Host) Step(msg []byte) ([]byte, error) {
	if hd, err := PeekHeader(msg); err == nil && hd.Type == TypeCommon && hd.ID == IDFailure1 {
		f, err := UnmarshalFailure(msg)
		if err != nil {
			return h.failed(fail(ReasonIncorrectPayload, "%v", err))
		}
		h.state = hostFailed
		return nil, &Error{Reason: f.Reason, Remote: true, Detail: "the controller sent AUTH_Failure1"}
	}
	switch h.state {
	case hostAwaitChallenge:
		return h.challenge(msg)
	case hostAwaitSuccess1:
		return h.success1(msg)
	case hostFailed:
		return nil, fail(ReasonIncorrectProtocol, "the transaction already failed")
	}
	return h.failed(fail(ReasonIncorrectProtocol, "message in state %d", h.state))
}

// failed ends the transaction with the host's own finding e: the Failure2
// telling the controller goes back with it.
func (h *Host) failed(e *Error) ([]byte, error) {
	h.state = hostFailed
	f := Failure{ID: IDFailure2, TID: h.cfg.TID, Code: ReasonCodeAuthentication, Reason: e.Reason}
	return f.Marshal(), e
}

func (h *Host) challenge(msg []byte) ([]byte, error) {
	ch, err := UnmarshalChallenge(msg)
	if err != nil {
		return h.failed(fail(ReasonIncorrectProtocol, "want DH-HMAC-CHAP_Challenge: %v", err))
	}
	if ch.TID != h.cfg.TID {
		return h.failed(fail(ReasonIncorrectProtocol, "challenge for transaction %d, not %d", ch.TID, h.cfg.TID))
	}
	if !slices.Contains(h.cfg.Hashes, ch.Hash) || len(ch.C1) != ch.Hash.Size() {
		return h.failed(fail(ReasonHashUnusable, "hash %s with a %d-byte challenge", ch.Hash, len(ch.C1)))
	}
	if !slices.Contains(h.cfg.Groups, ch.Group) {
		return h.failed(fail(ReasonDHGroupUnusable, "group %s not offered", ch.Group))
	}
	h.hash, h.group, h.s1 = ch.Hash, ch.Group, ch.Seq
	var public []byte
	if ch.Group == DHNull {
		if len(ch.DHValue) != 0 {
			return h.failed(fail(ReasonIncorrectPayload, "a DH value with the null group"))
		}
	} else {
		kp, err := GenerateKey(ch.Group, h.cfg.Rand)
		if err != nil {
			return h.failed(fail(ReasonFailed, "%v", err))
		}
		if h.skey, err = kp.Shared(ch.DHValue); err != nil {
			return h.failed(fail(ReasonDHGroupUnusable, "%v", err))
		}
		public = kp.Public
	}
	key, err := h.cfg.hostKey()
	if err != nil {
		return h.failed(fail(ReasonFailed, "%v", err))
	}
	c1, err := challengeFor(h.hash, h.skey, ch.C1)
	if err != nil {
		return h.failed(fail(ReasonFailed, "%v", err))
	}
	ex := Exchange{Hash: h.hash, TID: h.cfg.TID, HostNQN: h.cfg.HostNQN, SubNQN: h.cfg.SubNQN}
	resp, err := ex.HostResponse(key, c1, h.s1)
	if err != nil {
		return h.failed(fail(ReasonFailed, "%v", err))
	}
	r := Reply{TID: h.cfg.TID, Response: resp, DHValue: public}
	if h.cfg.CtrlSecret != nil {
		if h.c2, err = randomBytes(h.cfg.Rand, h.hash.Size()); err != nil {
			return h.failed(fail(ReasonFailed, "%v", err))
		}
		if h.s2, err = seqnum(h.cfg.Rand); err != nil {
			return h.failed(fail(ReasonFailed, "%v", err))
		}
		r.C2, r.Seq = h.c2, h.s2
	}
	out, err := r.Marshal()
	if err != nil {
		return h.failed(fail(ReasonFailed, "%v", err))
	}
	h.state = hostAwaitSuccess1
	return out, nil
}

func (h *Host) success1(msg []byte) ([]byte, error) {
	s, err := UnmarshalSuccess1(msg)
	if err != nil {
		return h.failed(fail(ReasonIncorrectProtocol, "want DH-HMAC-CHAP_Success1: %v", err))
	}
	if s.TID != h.cfg.TID {
		return h.failed(fail(ReasonIncorrectProtocol, "success for transaction %d, not %d", s.TID, h.cfg.TID))
	}
	if int(s.HL) != h.hash.Size() {
		return h.failed(fail(ReasonHashUnusable, "hash length %d, not %d", s.HL, h.hash.Size()))
	}
	if h.c2 == nil {
		h.state = hostDone
		return nil, nil
	}
	if s.Response == nil {
		return h.failed(fail(ReasonFailed, "the controller did not answer the host's challenge"))
	}
	key, err := h.cfg.ctrlKey()
	if err != nil {
		return h.failed(fail(ReasonFailed, "%v", err))
	}
	c2, err := challengeFor(h.hash, h.skey, h.c2)
	if err != nil {
		return h.failed(fail(ReasonFailed, "%v", err))
	}
	ex := Exchange{Hash: h.hash, TID: h.cfg.TID, HostNQN: h.cfg.HostNQN, SubNQN: h.cfg.SubNQN}
	want, err := ex.ControllerResponse(key, c2, h.s2)
	if err != nil {
		return h.failed(fail(ReasonFailed, "%v", err))
	}
	if !Verify(s.Response, want) {
		return h.failed(fail(ReasonFailed, "the controller's response does not match the controller secret"))
	}
	h.state = hostDone
	return MarshalSuccess2(h.cfg.TID), nil
}

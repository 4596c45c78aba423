package auth

import (
	"slices"
)

// Controller is the controller side of one queue's DH-HMAC-CHAP
// transactions, a pure state machine fed by the two commands that carry
// them: Send takes what an Authentication Send brought, Receive gives what
// an Authentication Receive returns. As in Linux nvmet, a message that
// fails does not fail its Send; the next Receive returns the Failure1
// that explains it, and the transaction is over:
//
//	Send(Negotiate) → Receive: Challenge
//	Send(Reply)     → Receive: Success1 ─┬─ authenticated (no C2)
//	                                     └─ Send(Success2) → authenticated
//	any failure     → Receive: Failure1 → failed
//	Send(Failure2)  → failed
//
// A new Negotiate on an authenticated queue starts a re-authentication;
// the queue stays authenticated unless it fails.
type Controller struct {
	cfg           Config
	state         ctrlState
	authenticated bool
	err           *Error // the failure, once failed or failing

	tid   uint16
	hash  Hash
	group DHGroup
	key   *KeyPair
	c1    []byte
	s1    uint32
	c2    []byte
	s2    uint32
	sess  []byte // the DH session key; nil for the null group
}

type ctrlState uint8

const (
	ctrlAwaitNegotiate ctrlState = iota
	ctrlSendChallenge
	ctrlAwaitReply
	ctrlSendSuccess1
	ctrlAwaitSuccess2
	ctrlSendFailure1
	ctrlIdle // authenticated, no transaction under way
	ctrlFailed
)

// NewController prepares a queue's authentication with the host's
// secrets. cfg.TID is ignored: the host chooses it.
func NewController(cfg Config) (*Controller, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return &Controller{cfg: cfg}, nil
}

// Authenticated reports whether the host has authenticated on this queue
// (and, if it asked to, the controller to the host).
func (c *Controller) Authenticated() bool { return c.authenticated && c.state != ctrlFailed }

// Failed returns the failure that ended the transaction, once it has: a
// Failure1 was returned or a Failure2 received. The association must then
// be torn down.
func (c *Controller) Failed() *Error {
	if c.state == ctrlFailed {
		return c.err
	}
	return nil
}

// Negotiated is the hash and group chosen for the current transaction.
func (c *Controller) Negotiated() (Hash, DHGroup) { return c.hash, c.group }

// Send takes the message of an Authentication Send.
func (c *Controller) Send(msg []byte) {
	hd, err := PeekHeader(msg)
	if err != nil {
		c.failing(fail(ReasonIncorrectPayload, "%v", err))
		return
	}
	if c.state == ctrlFailed {
		return
	}
	if hd.Type == TypeCommon && hd.ID == IDFailure2 {
		f, err := UnmarshalFailure(msg)
		if err != nil {
			c.failing(fail(ReasonIncorrectPayload, "%v", err))
			return
		}
		c.state, c.authenticated = ctrlFailed, false
		c.err = &Error{Reason: f.Reason, Remote: true, Detail: "the host sent AUTH_Failure2"}
		return
	}
	if hd.Type == TypeCommon && hd.ID == IDNegotiate && (c.state == ctrlAwaitNegotiate || c.state == ctrlIdle) {
		c.negotiate(msg)
		return
	}
	if hd.Type != TypeDHCHAP {
		c.failing(fail(ReasonIncorrectProtocol, "message %02x/%02x", hd.Type, hd.ID))
		return
	}
	switch {
	case hd.ID == IDReply && c.state == ctrlAwaitReply:
		c.reply(msg)
	case hd.ID == IDSuccess2 && c.state == ctrlAwaitSuccess2:
		tid, err := UnmarshalSuccess2(msg)
		if err != nil || tid != c.tid {
			c.failing(fail(ReasonIncorrectPayload, "success2 for transaction %d, not %d", tid, c.tid))
			return
		}
		c.done()
	default:
		c.failing(fail(ReasonIncorrectProtocol, "message %02x/%02x in state %d", hd.Type, hd.ID, c.state))
	}
}

// Receive returns the message of an Authentication Receive.
func (c *Controller) Receive() []byte {
	switch c.state {
	case ctrlSendChallenge:
		ch := Challenge{TID: c.tid, Hash: c.hash, Group: c.group, Seq: c.s1, C1: c.c1}
		if c.key != nil {
			ch.DHValue = c.key.Public
		}
		b, err := ch.Marshal()
		if err != nil {
			c.failing(fail(ReasonFailed, "%v", err))
			return c.Receive()
		}
		c.state = ctrlAwaitReply
		return b
	case ctrlSendSuccess1:
		s := Success1{TID: c.tid, HL: uint8(c.hash.Size())}
		if c.c2 != nil {
			key, err := c.cfg.ctrlKey()
			var ch, resp []byte
			if err == nil {
				ch, err = challengeFor(c.hash, c.sess, c.c2)
			}
			if err == nil {
				ex := Exchange{Hash: c.hash, TID: c.tid, HostNQN: c.cfg.HostNQN, SubNQN: c.cfg.SubNQN}
				resp, err = ex.ControllerResponse(key, ch, c.s2)
			}
			if err != nil {
				c.failing(fail(ReasonFailed, "%v", err))
				return c.Receive()
			}
			s.Response = resp
		}
		b, err := s.Marshal()
		if err != nil {
			c.failing(fail(ReasonFailed, "%v", err))
			return c.Receive()
		}
		if c.c2 != nil {
			c.state = ctrlAwaitSuccess2
		} else {
			c.done()
		}
		return b
	case ctrlSendFailure1, ctrlFailed:
		c.state, c.authenticated = ctrlFailed, false
		f := Failure{ID: IDFailure1, TID: c.tid, Code: ReasonCodeAuthentication, Reason: c.err.Reason}
		return f.Marshal()
	}
	// Nothing to receive now: the host is out of step.
	c.failing(fail(ReasonFailed, "Authentication Receive in state %d", c.state))
	return c.Receive()
}

func (c *Controller) done() {
	c.state, c.authenticated = ctrlIdle, true
	c.key, c.c1, c.c2, c.sess = nil, nil, nil, nil
}

// failing records a failure for the next Receive to report.
func (c *Controller) failing(e *Error) {
	if c.state == ctrlFailed || c.state == ctrlSendFailure1 {
		return
	}
	c.state, c.err = ctrlSendFailure1, e
	c.key, c.c1, c.c2, c.sess = nil, nil, nil, nil
}

func (c *Controller) negotiate(msg []byte) {
	n, err := UnmarshalNegotiate(msg)
	c.tid = n.TID
	if hd, herr := PeekHeader(msg); herr == nil {
		c.tid = hd.TID
	}
	if err != nil {
		c.failing(fail(ReasonIncorrectPayload, "%v", err))
		return
	}
	if n.SCC != 0 {
		c.failing(fail(ReasonConcatMismatch, "secure channel concatenation is not supported"))
		return
	}
	c.hash, c.group = 0, 0
	i := slices.IndexFunc(c.cfg.Hashes, func(h Hash) bool { return slices.Contains(n.Hashes, h) })
	if i < 0 {
		c.failing(fail(ReasonHashUnusable, "the host offers hashes %v, the controller accepts %v", n.Hashes, c.cfg.Hashes))
		return
	}
	c.hash = c.cfg.Hashes[i]
	j := slices.IndexFunc(c.cfg.Groups, func(g DHGroup) bool { return slices.Contains(n.Groups, g) })
	if j < 0 {
		c.failing(fail(ReasonDHGroupUnusable, "the host offers groups %v, the controller accepts %v", n.Groups, c.cfg.Groups))
		return
	}
	c.group = c.cfg.Groups[j]
	if c.c1, err = randomBytes(c.cfg.Rand, c.hash.Size()); err == nil {
		c.s1, err = seqnum(c.cfg.Rand)
	}
	if err == nil && c.group != DHNull {
		c.key, err = GenerateKey(c.group, c.cfg.Rand)
	}
	if err != nil {
		c.failing(fail(ReasonFailed, "%v", err))
		return
	}
	c.state = ctrlSendChallenge
}

func (c *Controller) reply(msg []byte) {
	r, err := UnmarshalReply(msg)
	switch {
	case err != nil:
		c.failing(fail(ReasonIncorrectPayload, "%v", err))
		return
	case r.TID != c.tid:
		c.failing(fail(ReasonIncorrectPayload, "reply for transaction %d, not %d", r.TID, c.tid))
		return
	case len(r.Response) != c.hash.Size():
		c.failing(fail(ReasonIncorrectPayload, "a %d-byte response for %s", len(r.Response), c.hash))
		return
	}
	if c.key != nil {
		if c.sess, err = c.key.Shared(r.DHValue); err != nil {
			c.failing(fail(ReasonDHGroupUnusable, "%v", err))
			return
		}
	} else if len(r.DHValue) != 0 {
		c.failing(fail(ReasonIncorrectPayload, "a DH value with the null group"))
		return
	}
	key, err := c.cfg.hostKey()
	var ch, want []byte
	if err == nil {
		ch, err = challengeFor(c.hash, c.sess, c.c1)
	}
	if err == nil {
		ex := Exchange{Hash: c.hash, TID: c.tid, HostNQN: c.cfg.HostNQN, SubNQN: c.cfg.SubNQN}
		want, err = ex.HostResponse(key, ch, c.s1)
	}
	if err != nil {
		c.failing(fail(ReasonFailed, "%v", err))
		return
	}
	if !Verify(r.Response, want) {
		c.failing(fail(ReasonFailed, "the host's response does not match its secret"))
		return
	}
	// A challenge with sequence number 0 only seeds a TLS PSK (secure
	// channel concatenation, not supported): no controller response.
	if r.C2 != nil && r.Seq != 0 {
		if c.cfg.CtrlSecret == nil {
			c.failing(fail(ReasonFailed, "the host asks the controller to authenticate, and it has no controller secret for this host"))
			return
		}
		c.c2, c.s2 = r.C2, r.Seq
	}
	c.state = ctrlSendSuccess1
}

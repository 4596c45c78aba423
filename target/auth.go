package target

import (
	"context"
	"fmt"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/auth"
)

// In-band authentication (DH-HMAC-CHAP, NVMe base specification 2.0,
// Authentication), as Linux nvmet does it:
//
//   - A host with secrets (SubsystemConfig.DHCHAP) gets AUTHREQ.ATR in the
//     response of every Connect, admin and I/O queue alike, and each queue
//     authenticates on its own with Authentication Send and Receive
//     (nvme/auth.Controller runs the transaction; this file only carries
//     its messages).
//   - Until its queue has authenticated, every other command is refused
//     with Authentication Required, Property Get/Set included (nvmet
//     lets those two through; the spec and the Linux host need neither
//     before authenticating). An I/O queue can only join a controller
//     that is ready, and only an authenticated admin queue can make it so.
//   - A failed transaction ends the association once the host has its
//     Failure1 (or the Failure2 it sent is acknowledged): every queue of
//     the controller is closed and nothing of it is kept.
//   - Commands of a queue that has yet to authenticate are not keep-alive
//     traffic, and while a queue of the controller has yet to
//     authenticate the keep-alive timeout is at least MaxIdle: a host
//     computing a large DH group's values sends nothing for a while, and
//     one that never authenticates is gone after MaxIdle whatever it
//     sends.
//   - The discovery controller never asks hosts to authenticate.

// DHCHAPKeys are one host's DH-HMAC-CHAP secrets, in the DHHC-1 form of
// `nvme gen-dhchap-key`: Secret authenticates the host; CtrlSecret, if
// set, lets the host authenticate the controller too (bidirectional).
type DHCHAPKeys struct {
	Secret, CtrlSecret string
}

// connectATR is AUTHREQ.ATR in a Connect response's DW0 (Linux's
// NVME_CONNECT_AUTHREQ_ATR): the queue must authenticate. Bit 18, ASCR,
// asks for secure channel concatenation, which nearstore does not offer.
const connectATR = 1 << 17

// hostKeys are a host's parsed secrets.
type hostKeys struct {
	secret     auth.Secret
	ctrlSecret *auth.Secret
}

// setAuth parses the subsystem's DH-HMAC-CHAP configuration.
func (ss *subsystem) setAuth(sc SubsystemConfig) error {
	for _, h := range sc.DHCHAPHashes {
		if h.Size() == 0 {
			return fmt.Errorf("target: %s: unknown DH-HMAC-CHAP hash %d", ss.nqn, h)
		}
	}
	for _, g := range sc.DHCHAPGroups {
		if !g.Known() {
			return fmt.Errorf("target: %s: unknown DH-HMAC-CHAP group %d", ss.nqn, g)
		}
	}
	ss.authHashes, ss.authGroups = sc.DHCHAPHashes, sc.DHCHAPGroups
	ss.keys = make(map[string]hostKeys, len(sc.DHCHAP))
	for nqn, k := range sc.DHCHAP {
		if !ss.admits(nqn) {
			return fmt.Errorf("target: %s: DH-HMAC-CHAP secret for host %s, which may not connect (allow it, or allow any host)", ss.nqn, nqn)
		}
		s, err := auth.ParseSecret(k.Secret)
		if err != nil {
			return fmt.Errorf("target: %s: host %s: secret: %w", ss.nqn, nqn, err)
		}
		hk := hostKeys{secret: s}
		if k.CtrlSecret != "" {
			cs, err := auth.ParseSecret(k.CtrlSecret)
			if err != nil {
				return fmt.Errorf("target: %s: host %s: controller secret: %w", ss.nqn, nqn, err)
			}
			hk.ctrlSecret = &cs
		}
		ss.keys[nqn] = hk
	}
	return nil
}

// startAuth gives a queue that just connected its authentication, if its
// host has secrets, and returns the AUTHREQ bits for the Connect response.
func (s *session) startAuth(hostNQN string) (uint32, error) {
	if s.discovery {
		return 0, nil
	}
	k, ok := s.ss.keys[hostNQN]
	if !ok {
		return 0, nil
	}
	m, err := auth.NewController(auth.Config{
		HostNQN: hostNQN, SubNQN: s.ss.nqn,
		Secret: k.secret, CtrlSecret: k.ctrlSecret,
		Hashes: s.ss.authHashes, Groups: s.ss.authGroups,
	})
	if err != nil {
		return 0, err
	}
	s.auth = m
	return connectATR, nil
}

// authAllowed refuses a command on a queue that has yet to authenticate,
// unless it is one of those that authenticate it.
func (s *session) authAllowed(r *request) nvme.Status {
	if s.auth == nil || s.authOK.Load() {
		return 0
	}
	if r.sqe.Opcode == nvme.AdminFabrics {
		switch r.sqe.FabricsType() {
		case auth.FabricsAuthSend, auth.FabricsAuthReceive, nvme.FabricsConnect:
			return 0
		}
	}
	return nvme.StatusAuthRequired | nvme.DNR
}

func checkAuthSend(_ *session, r *request) (int, nvme.Status) {
	tl, ok := auth.CheckCommand(&r.sqe)
	if !ok || tl > auth.MaxMessage {
		return 0, nvme.StatusInvalidField | nvme.DNR
	}
	if r.sqe.DPTR.Length != tl {
		return 0, nvme.StatusSGLDataLenInvalid | nvme.DNR
	}
	return int(tl), 0
}

// authSend hands an Authentication Send's message to the queue's
// transaction. A queue whose host has no secret cannot authenticate: its
// next Authentication Receive answers Failure1 (as nvmet: "no host key").
func authSend(_ context.Context, s *session, r *request) completion {
	if s.auth == nil {
		s.authRefused = true
		return completion{}
	}
	s.auth.Send(r.data)
	s.noteAuth()
	if e := s.auth.Failed(); e != nil {
		// The host sent Failure2: acknowledge it, then end the association.
		return s.completeThenFail(r, completion{}, e)
	}
	return completion{}
}

// authReceive returns the transaction's next message, padded with zeros
// to the length asked for (the Linux host asks for 4 KiB).
func authReceive(_ context.Context, s *session, r *request) completion {
	al, ok := auth.CheckCommand(&r.sqe)
	if !ok {
		return status(nvme.StatusInvalidField | nvme.DNR)
	}
	n, st := s.transferLen(r, uint64(al))
	if st != 0 {
		return status(st)
	}
	var msg []byte
	var failed *auth.Error
	if s.auth == nil {
		f := auth.Failure{ID: auth.IDFailure1, Code: auth.ReasonCodeAuthentication, Reason: auth.ReasonFailed}
		msg = f.Marshal()
		failed = &auth.Error{Reason: auth.ReasonFailed, Detail: "the host has no DH-HMAC-CHAP secret here"}
		if !s.authRefused {
			failed.Detail = "Authentication Receive before any Send"
		}
	} else {
		msg = s.auth.Receive()
		failed = s.auth.Failed()
		s.noteAuth()
	}
	if len(msg) > n {
		// The host's buffer is too small for the message: nothing to do
		// but end the transaction.
		if failed == nil {
			failed = &auth.Error{Reason: auth.ReasonFailed, Detail: fmt.Sprintf("a %d-byte message for a %d-byte buffer", len(msg), n)}
		}
		return s.completeThenFail(r, status(nvme.StatusInvalidField|nvme.DNR), failed)
	}
	data := make([]byte, n)
	copy(data, msg)
	c := completion{data: data}
	if failed != nil {
		return s.completeThenFail(r, c, failed)
	}
	return c
}

// noteAuth publishes the transaction's outcome to authAllowed, and logs a
// queue's authentication once.
func (s *session) noteAuth() {
	now := s.auth.Authenticated()
	if now && !s.authOK.Load() {
		h, g := s.auth.Negotiated()
		s.log.Info("queue authenticated", "hash", h, "dhgroup", g)
		s.ctrl.authenticated(s.qid)
	}
	s.authOK.Store(now)
}

// completeThenFail sends r's completion now and then ends the controller:
// the host must see the failure message before its connections close.
func (s *session) completeThenFail(r *request, c completion, e *auth.Error) completion {
	s.log.Warn("authentication failed: closing the association", "err", e, "host", s.ctrl.hostNQN)
	s.srv.metrics.error("auth_failed")
	r.to(reqExecuting, reqParked)
	s.qp.completeParked(r.sqe.CID, c)
	s.ctrl.fail()
	return completion{parked: true}
}

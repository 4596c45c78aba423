package host

import (
	"context"
	"fmt"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/auth"
)

// Connect response DW0 AUTHREQ bits (Linux's NVME_CONNECT_AUTHREQ_*): ATR,
// the queue must authenticate; ASCR, with secure channel concatenation,
// which nearstore does not do.
const (
	connectATR  = 1 << 17
	connectASCR = 1 << 18
)

// authenticate runs DH-HMAC-CHAP on q after its Connect, whose response
// DW0 was dw0, as the Linux host does: when the controller asks (ATR), or
// when the host wants the controller authenticated (a controller secret)
// even if it did not ask. Every queue authenticates on its own, each
// with a transaction ID of its own.
func (a *association) authenticate(ctx context.Context, q *queue, dw0 uint32) error {
	o := &a.c.opts
	required := dw0&(connectATR|connectASCR) != 0
	if !required && (o.DHCHAPCtrlSecret == "" || a.c.discovery) {
		return nil
	}
	if dw0&connectASCR != 0 {
		return fmt.Errorf("%w: queue %d: the controller requires secure channel concatenation (TLS), which is not supported", ErrAuthentication, q.qid)
	}
	if o.DHCHAPSecret == "" {
		return fmt.Errorf("%w: queue %d: the controller requires authentication and no DH-HMAC-CHAP secret is set", ErrAuthentication, q.qid)
	}
	// withDefaults checked both secrets.
	sec, _ := auth.ParseSecret(o.DHCHAPSecret)
	cfg := auth.Config{
		HostNQN: o.HostNQN, SubNQN: a.c.subnqn, Secret: sec,
		Hashes: o.DHCHAPHashes, Groups: o.DHCHAPGroups,
		TID: uint16(a.c.authTID.Add(1)),
	}
	if o.DHCHAPCtrlSecret != "" {
		cs, _ := auth.ParseSecret(o.DHCHAPCtrlSecret)
		cfg.CtrlSecret = &cs
	}
	fail := func(err error) error {
		return fmt.Errorf("%w: queue %d: %w", ErrAuthentication, q.qid, err)
	}
	m, err := auth.NewHost(cfg)
	if err != nil {
		return fail(err)
	}
	out, err := m.Start()
	if err != nil {
		return fail(err)
	}
	for {
		if err := a.authSend(ctx, q, out); err != nil {
			return fail(err)
		}
		if m.Done() {
			break
		}
		msg, err := a.authReceive(ctx, q)
		if err != nil {
			return fail(err)
		}
		out, err = m.Step(msg)
		if err != nil {
			if out != nil {
				// Tell the controller why (Failure2); it ends the
				// association whatever comes of this.
				_ = a.authSend(ctx, q, out)
			}
			return fail(err)
		}
		if out == nil {
			break // Success1 without a controller response to confirm
		}
	}
	if q.qid == 0 {
		h, g := m.Negotiated()
		a.c.log.Info("host: authenticated", "hash", h, "dhgroup", g, "bidirectional", cfg.CtrlSecret != nil)
	}
	return nil
}

func (a *association) authSend(ctx context.Context, q *queue, msg []byte) error {
	ctx, cancel := a.cmdCtx(ctx)
	defer cancel()
	var cmd nvme.Command
	auth.CommandFields(&cmd, true, uint32(len(msg)))
	// Messages are small (at most MaxMessage): in the capsule.
	_, err := q.do(ctx, &cmd, msg, nil, true)
	return err
}

func (a *association) authReceive(ctx context.Context, q *queue) ([]byte, error) {
	ctx, cancel := a.cmdCtx(ctx)
	defer cancel()
	var cmd nvme.Command
	buf := make([]byte, auth.MaxMessage)
	auth.CommandFields(&cmd, false, uint32(len(buf)))
	if _, err := q.do(ctx, &cmd, nil, buf, false); err != nil {
		return nil, err
	}
	return buf, nil
}

package auth

import (
	"bytes"
	"errors"
	"testing"
)

func secret(t testing.TB, b byte, tr Hash) Secret {
	t.Helper()
	n := 32
	if tr != 0 {
		n = tr.Size()
	}
	return Secret{Key: bytes.Repeat([]byte{b}, n), Transform: tr}
}

// outcome is how one transaction ended on each side.
type outcome struct {
	hostErr, ctrlErr *Error
	ctrlAuth         bool
	hash             Hash
	group            DHGroup
	messages         int
}

// exchange runs a transaction between h and c as the commands would carry
// it: each host message is an Authentication Send, each controller message
// an Authentication Receive.
func exchange(t *testing.T, h *Host, c *Controller) outcome {
	t.Helper()
	var o outcome
	out, err := h.Start()
	if err != nil {
		t.Fatal(err)
	}
	for {
		c.Send(out)
		o.messages++
		if h.Done() || c.Failed() != nil {
			break
		}
		in := c.Receive()
		o.messages++
		out, err = h.Step(in)
		if err != nil {
			if !errors.As(err, &o.hostErr) || !errors.Is(err, ErrFailed) {
				t.Fatalf("host error %v is not an *Error", err)
			}
			if out != nil {
				c.Send(out)
			}
			break
		}
		if out == nil {
			break
		}
	}
	o.ctrlErr, o.ctrlAuth = c.Failed(), c.Authenticated()
	o.hash, o.group = c.Negotiated()
	return o
}

func TestExchange(t *testing.T) {
	const hostNQN, subNQN = "nqn.2014-08.org.nvmexpress:uuid:1", "nqn.2026-11.io.nearstore:s"
	good := secret(t, 1, SHA256)
	other := secret(t, 2, SHA256)
	ctrl := secret(t, 3, SHA512)
	ctrl2 := secret(t, 4, SHA512)
	type side struct {
		secret     Secret
		ctrlSecret *Secret
		hashes     []Hash
		groups     []DHGroup
	}
	for _, tc := range []struct {
		name       string
		host, ctrl side
		// want: the controller authenticated the host; else the reason
		// each side ends with and whether the host found it.
		ok        bool
		reason    uint8
		hostFound bool
		wantHash  Hash
		wantGroup DHGroup
	}{
		{name: "null sha256", host: side{secret: good}, ctrl: side{secret: good}, ok: true, wantHash: SHA256, wantGroup: DHNull},
		{name: "sha384", host: side{secret: good, hashes: []Hash{SHA384}}, ctrl: side{secret: good}, ok: true, wantHash: SHA384},
		{name: "sha512", host: side{secret: good}, ctrl: side{secret: good, hashes: []Hash{SHA512, SHA256}}, ok: true, wantHash: SHA512},
		{name: "ffdhe2048", host: side{secret: good}, ctrl: side{secret: good, groups: []DHGroup{FFDHE2048}}, ok: true, wantHash: SHA256, wantGroup: FFDHE2048},
		{name: "ffdhe3072", host: side{secret: good, groups: []DHGroup{FFDHE3072}}, ctrl: side{secret: good}, ok: true, wantHash: SHA256, wantGroup: FFDHE3072},
		{name: "ffdhe4096 sha384", host: side{secret: good, hashes: []Hash{SHA384}, groups: []DHGroup{FFDHE4096}}, ctrl: side{secret: good}, ok: true, wantHash: SHA384, wantGroup: FFDHE4096},
		{name: "ffdhe6144", host: side{secret: good, groups: []DHGroup{FFDHE6144}}, ctrl: side{secret: good}, ok: true, wantHash: SHA256, wantGroup: FFDHE6144},
		{name: "ffdhe8192 sha512 bidirectional", host: side{secret: good, ctrlSecret: &ctrl, hashes: []Hash{SHA512}, groups: []DHGroup{FFDHE8192}},
			ctrl: side{secret: good, ctrlSecret: &ctrl}, ok: true, wantHash: SHA512, wantGroup: FFDHE8192},
		{name: "bidirectional null", host: side{secret: good, ctrlSecret: &ctrl}, ctrl: side{secret: good, ctrlSecret: &ctrl}, ok: true, wantHash: SHA256},
		{name: "untransformed secret", host: side{secret: secret(t, 9, 0)}, ctrl: side{secret: secret(t, 9, 0)}, ok: true, wantHash: SHA256},
		{name: "wrong host secret", host: side{secret: other}, ctrl: side{secret: good}, reason: ReasonFailed},
		{name: "wrong host secret with DH", host: side{secret: other, groups: []DHGroup{FFDHE2048}}, ctrl: side{secret: good}, reason: ReasonFailed},
		{name: "wrong controller secret", host: side{secret: good, ctrlSecret: &ctrl2}, ctrl: side{secret: good, ctrlSecret: &ctrl}, reason: ReasonFailed, hostFound: true},
		{name: "controller without controller secret", host: side{secret: good, ctrlSecret: &ctrl}, ctrl: side{secret: good}, reason: ReasonFailed},
		{name: "no common hash", host: side{secret: good, hashes: []Hash{SHA384}}, ctrl: side{secret: good, hashes: []Hash{SHA256}}, reason: ReasonHashUnusable},
		{name: "no common group", host: side{secret: good, groups: []DHGroup{DHNull}}, ctrl: side{secret: good, groups: []DHGroup{FFDHE2048}}, reason: ReasonDHGroupUnusable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHost(Config{HostNQN: hostNQN, SubNQN: subNQN, Secret: tc.host.secret, CtrlSecret: tc.host.ctrlSecret,
				Hashes: tc.host.hashes, Groups: tc.host.groups, TID: 5})
			if err != nil {
				t.Fatal(err)
			}
			c, err := NewController(Config{HostNQN: hostNQN, SubNQN: subNQN, Secret: tc.ctrl.secret, CtrlSecret: tc.ctrl.ctrlSecret,
				Hashes: tc.ctrl.hashes, Groups: tc.ctrl.groups})
			if err != nil {
				t.Fatal(err)
			}
			o := exchange(t, h, c)
			if tc.ok {
				if !o.ctrlAuth || !h.Done() || o.hostErr != nil || o.ctrlErr != nil {
					t.Fatalf("not authenticated: %+v", o)
				}
				if o.hash != tc.wantHash || o.group != tc.wantGroup {
					t.Fatalf("negotiated %s %s, want %s %s", o.hash, o.group, tc.wantHash, tc.wantGroup)
				}
				if hh, hg := h.Negotiated(); hh != o.hash || hg != o.group {
					t.Fatalf("host negotiated %s %s, controller %s %s", hh, hg, o.hash, o.group)
				}
				return
			}
			if o.ctrlAuth || h.Done() || o.hostErr == nil || o.ctrlErr == nil {
				t.Fatalf("authenticated, or a side did not fail: %+v", o)
			}
			if o.hostErr.Reason != tc.reason || o.ctrlErr.Reason != tc.reason {
				t.Fatalf("reasons host %v, controller %v; want %#x", o.hostErr, o.ctrlErr, tc.reason)
			}
			// Whoever found the failure told the other, who reports it
			// as the peer's.
			if o.hostErr.Remote == tc.hostFound || o.ctrlErr.Remote != tc.hostFound {
				t.Fatalf("host %v, controller %v: want the host to have found it: %v", o.hostErr, o.ctrlErr, tc.hostFound)
			}
		})
	}
}

// TestControllerOutOfStep: messages in the wrong order, or of another
// transaction, end it with a Failure1 and an authenticated queue is never
// the result.
func TestControllerOutOfStep(t *testing.T) {
	cfg := Config{HostNQN: "h", SubNQN: "s", Secret: secret(t, 1, SHA256)}
	neg, _ := (&Negotiate{TID: 1, Hashes: []Hash{SHA256}, Groups: []DHGroup{DHNull}}).Marshal()
	reply, _ := (&Reply{TID: 1, Response: make([]byte, 32)}).Marshal()
	for _, tc := range []struct {
		name   string
		sends  [][]byte
		reason uint8
	}{
		{"reply first", [][]byte{reply}, ReasonIncorrectProtocol},
		{"success2 first", [][]byte{MarshalSuccess2(1)}, ReasonIncorrectProtocol},
		{"garbage", [][]byte{{1}}, ReasonIncorrectPayload},
		{"negotiate twice", [][]byte{neg, neg}, ReasonIncorrectProtocol},
		{"secure channel", [][]byte{func() []byte { b, _ := (&Negotiate{TID: 1, SCC: 1, Hashes: []Hash{SHA256}}).Marshal(); return b }()}, ReasonConcatMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := NewController(cfg)
			for _, m := range tc.sends {
				c.Send(m)
			}
			f, err := UnmarshalFailure(c.Receive())
			if err != nil || f.ID != IDFailure1 || f.Reason != tc.reason {
				t.Fatalf("got %+v, %v; want Failure1 reason %#x", f, err, tc.reason)
			}
			if c.Failed() == nil || c.Authenticated() {
				t.Fatal("the transaction did not end in failure")
			}
		})
	}
	// A reply for another transaction, or with a wrong response.
	c, _ := NewController(cfg)
	c.Send(neg)
	ch, err := UnmarshalChallenge(c.Receive())
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := (&Reply{TID: 2, Response: make([]byte, 32)}).Marshal()
	c.Send(bad)
	if f, _ := UnmarshalFailure(c.Receive()); f.Reason != ReasonIncorrectPayload || c.Failed() == nil {
		t.Fatalf("reply for transaction 2 after challenge %+v: %+v", ch, f)
	}
}

// TestReauthenticate: a new Negotiate on an authenticated queue runs a new
// transaction and the queue stays authenticated through it.
func TestReauthenticate(t *testing.T) {
	cfg := Config{HostNQN: "h", SubNQN: "s", Secret: secret(t, 1, SHA384)}
	c, _ := NewController(cfg)
	for tid := range uint16(2) {
		hc := cfg
		hc.TID = tid
		h, _ := NewHost(hc)
		if o := exchange(t, h, c); !o.ctrlAuth || !h.Done() {
			t.Fatalf("transaction %d: %+v", tid, o)
		}
	}
}

func TestGenerateSecret(t *testing.T) {
	for _, tc := range []struct {
		t   Hash
		n   int
		bad bool
	}{{0, 32, false}, {0, 48, false}, {0, 64, false}, {SHA256, 32, false}, {SHA384, 48, false}, {SHA512, 64, false},
		{SHA256, 48, true}, {0, 16, true}, {Hash(4), 32, true}} {
		s, err := GenerateSecret(bytes.NewReader(bytes.Repeat([]byte{7}, 64)), tc.t, tc.n, "nqn.x")
		if tc.bad {
			if !errors.Is(err, ErrSecret) {
				t.Errorf("%s %d: %v, want ErrSecret", tc.t, tc.n, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s %d: %v", tc.t, tc.n, err)
		}
		back, err := ParseSecret(s.String())
		if err != nil || back.Transform != tc.t || len(back.Key) != tc.n {
			t.Fatalf("%s %d: %s parses to %+v, %v", tc.t, tc.n, s, back, err)
		}
		// A transformed key is the transformation of the random bytes for the NQN.
		if tc.t != 0 {
			want, _ := Secret{Key: bytes.Repeat([]byte{7}, tc.n), Transform: tc.t}.TransformedKey("nqn.x")
			if !bytes.Equal(s.Key, want) {
				t.Fatalf("%s: key %x, want %x", tc.t, s.Key, want)
			}
		}
	}
}

// FuzzController: any sequence of messages (split from the input at 0xFF
// 0xFE markers) sent to a controller, with receives in between, never
// panics and never authenticates a host that did not answer a challenge.
func FuzzController(f *testing.F) {
	neg, _ := (&Negotiate{TID: 1, Hashes: []Hash{SHA256}, Groups: []DHGroup{DHNull, FFDHE2048}}).Marshal()
	reply, _ := (&Reply{TID: 1, Response: make([]byte, 32), C2: make([]byte, 32), Seq: 3}).Marshal()
	sep := []byte{0xFF, 0xFE}
	f.Add(neg)
	f.Add(bytes.Join([][]byte{neg, reply}, sep))
	f.Add(bytes.Join([][]byte{neg, reply, MarshalSuccess2(1)}, sep))
	f.Add((&Failure{ID: IDFailure2, Reason: 1}).Marshal())
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := NewController(Config{HostNQN: "h", SubNQN: "s", Secret: secret(t, 1, SHA256), CtrlSecret: &Secret{Key: make([]byte, 32)},
			Groups: []DHGroup{DHNull}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range bytes.Split(in, sep) {
			c.Send(m)
			if c.Authenticated() {
				t.Fatal("authenticated without a valid response")
			}
			_ = c.Receive()
		}
	})
}

// FuzzHost: any message a controller could send, after Negotiate and
// after a genuine challenge, is taken without a panic, and an invalid one
// never completes the transaction.
func FuzzHost(f *testing.F) {
	ch, _ := (&Challenge{TID: 0, Hash: SHA256, C1: make([]byte, 32), Seq: 9}).Marshal()
	s1, _ := (&Success1{TID: 0, HL: 32, Response: make([]byte, 32)}).Marshal()
	f.Add(ch)
	f.Add(s1)
	f.Add((&Failure{ID: IDFailure1, Reason: 6}).Marshal())
	f.Fuzz(func(t *testing.T, in []byte) {
		cs := secret(t, 3, SHA256)
		h, err := NewHost(Config{HostNQN: "h", SubNQN: "s", Secret: secret(t, 1, SHA256), CtrlSecret: &cs, Groups: []DHGroup{DHNull, FFDHE2048}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Start(); err != nil {
			t.Fatal(err)
		}
		_, _ = h.Step(in)
		_, _ = h.Step(in)
		if h.Done() {
			t.Fatal("done without a controller that knows the controller secret")
		}
	})
}

// BenchmarkExchange: one whole transaction, both sides' work, per group
// (SHA-256, unidirectional): what authenticating one queue costs in CPU.
func BenchmarkExchange(b *testing.B) {
	sec := Secret{Key: bytes.Repeat([]byte{1}, 32), Transform: SHA256}
	for _, g := range AllGroups {
		b.Run(g.String(), func(b *testing.B) {
			cfg := Config{HostNQN: "h", SubNQN: "s", Secret: sec, Groups: []DHGroup{g}}
			for b.Loop() {
				h, _ := NewHost(cfg)
				c, _ := NewController(cfg)
				out, _ := h.Start()
				c.Send(out)
				out, _ = h.Step(c.Receive())
				c.Send(out)
				if _, err := h.Step(c.Receive()); err != nil || !c.Authenticated() {
					b.Fatal(err)
				}
			}
		})
	}
}

package host

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/nvme/auth"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

const authHostNQN = "nqn.2014-08.org.nvmexpress:uuid:0a0b0c0d-0000-4000-8000-00000000a17e"

func newSecret(t *testing.T, tr auth.Hash, n int) string {
	t.Helper()
	s, err := auth.GenerateSecret(rand.Reader, tr, n, authHostNQN)
	if err != nil {
		t.Fatal(err)
	}
	return s.String()
}

// TestAuthReconnect: an authenticated, bidirectional association with a
// DH group, in one process with the target (so the race detector sees
// both sides), keeps I/O flowing on two queues while every connection is
// cut: every queue of the new association authenticates again.
func TestAuthReconnect(t *testing.T) {
	checkGoroutines(t)
	v, err := volume.Open("mem:16MiB")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	secret, ctrlSecret := newSecret(t, auth.SHA512, 64), newSecret(t, 0, 32)
	tgt := testtarget.Start(t, testtarget.Config{NQN: testNQN, Name: "mem", Volume: v,
		DHCHAP:       map[string]target.DHCHAPKeys{authHostNQN: {Secret: secret, CtrlSecret: ctrlSecret}},
		DHCHAPGroups: []auth.DHGroup{auth.FFDHE2048}})
	t.Cleanup(tgt.Stop)
	p := newProxy(t, tgt.Addr())
	opts := Options{HostNQN: authHostNQN, IOQueues: 2, ReconnectDelay: 10 * time.Millisecond,
		DHCHAPSecret: secret, DHCHAPCtrlSecret: ctrlSecret}
	c, ns := connectNS(t, ctxT(t, 20*time.Second), p.addr(), 1, opts)
	readAcrossCut(t, c, ns, p, cutReads{want: bytes.Repeat([]byte("authenticated"), 700), off: 8192, readers: 2, wait: 20 * time.Second})

	// A host whose controller secret is wrong refuses the controller; the
	// target serves the right host on.
	bad := opts
	bad.DHCHAPCtrlSecret = newSecret(t, 0, 32)
	if _, err := Connect(ctxT(t, 20*time.Second), tgt.Addr(), testNQN, bad); !errors.Is(err, ErrAuthentication) {
		t.Fatalf("connect expecting another controller secret: %v", err)
	}
	if _, err := ns.ReadAtContext(ctxT(t, 20*time.Second), make([]byte, 4096), 8192); err != nil {
		t.Fatalf("the authenticated host after another's failure: %v", err)
	}
}

// TestAuthOptions: secrets are checked when Connect starts.
func TestAuthOptions(t *testing.T) {
	for _, o := range []Options{
		{DHCHAPSecret: "DHHC-1:00:bm9wZQ==:"},
		{DHCHAPCtrlSecret: newSecret(t, 0, 32)},
		{DHCHAPSecret: newSecret(t, 0, 32), DHCHAPCtrlSecret: "secret"},
	} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

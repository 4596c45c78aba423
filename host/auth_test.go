package host

import (
	"bytes"
	"crypto/rand"
	"errors"
	"sync"
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
	c, err := Connect(ctxT(t, 20*time.Second), p.addr(), testNQN, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 60*time.Second)
	want := bytes.Repeat([]byte("authenticated"), 700)
	if _, err := ns.WriteAtContext(ctx, want, 8192); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				got := make([]byte, len(want))
				_, err := ns.ReadAtContext(ctx, got, 8192)
				if err != nil && !errors.Is(err, ErrConnectionLost) {
					t.Errorf("read: %v", err)
					return
				}
				if err == nil && !bytes.Equal(got, want) {
					t.Error("read other data")
					return
				}
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	p.killAll()
	waitFor(t, 20*time.Second, "reconnect", func() bool { return c.Stats().Reconnects >= 1 })
	close(stop)
	wg.Wait()
	got := make([]byte, len(want))
	if _, err := ns.ReadAtContext(ctx, got, 8192); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after reconnect: %v", err)
	}

	// A host whose controller secret is wrong refuses the controller; the
	// target serves the right host on.
	bad := opts
	bad.DHCHAPCtrlSecret = newSecret(t, 0, 32)
	if _, err := Connect(ctxT(t, 20*time.Second), tgt.Addr(), testNQN, bad); !errors.Is(err, ErrAuthentication) {
		t.Fatalf("connect expecting another controller secret: %v", err)
	}
	if _, err := ns.ReadAtContext(ctx, got, 8192); err != nil {
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

package security_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/auth"
	"github.com/nearstore/nearstore/nvme/tcp"
)

// DH-HMAC-CHAP against the real `target serve` process: hosts with the
// right secrets connect and do I/O over every hash and DH group, wrong
// secrets fail with host.ErrAuthentication on whichever side finds them
// and the target stays up (serve's cleanup checks), and a host that does
// not authenticate gets nothing past Connect, on the admin queue or an
// I/O queue.

const authHost = "nqn.2014-08.org.nvmexpress:uuid:5ec0e7a1-0000-4000-8000-000000000001"

func genSecret(t *testing.T, tr auth.Hash, n int) string {
	t.Helper()
	s, err := auth.GenerateSecret(rand.Reader, tr, n, authHost)
	if err != nil {
		t.Fatal(err)
	}
	return s.String()
}

// writeRead writes a block through c's namespace 1 and reads it back.
func writeRead(t *testing.T, ctx context.Context, c *host.Controller) {
	t.Helper()
	ns, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4096)
	_, _ = rand.Read(want)
	if call := <-ns.WriteBlocks(ctx, want, 8, nil).Done; call.Err != nil {
		t.Fatal(call.Err)
	}
	got := make([]byte, len(want))
	if call := <-ns.ReadBlocks(ctx, got, 8, nil).Done; call.Err != nil {
		t.Fatal(call.Err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("read back other data")
	}
}

func TestAuthSecrets(t *testing.T) {
	secret := genSecret(t, auth.SHA256, 32)
	ctrlSecret := genSecret(t, 0, 48)
	addr, _ := serve(t, "--allow-host", authHost, "--dhchap-secret", authHost+"="+secret, "--dhchap-ctrl-secret", authHost+"="+ctrlSecret)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func(o host.Options) (*host.Controller, error) {
		o.HostNQN, o.IOQueues, o.DialTimeout = authHost, 2, 30*time.Second
		return host.Connect(ctx, addr, subNQN, o)
	}

	t.Run("right secret", func(t *testing.T) {
		c, err := connect(host.Options{DHCHAPSecret: secret})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		writeRead(t, ctx, c)
	})
	t.Run("bidirectional", func(t *testing.T) {
		c, err := connect(host.Options{DHCHAPSecret: secret, DHCHAPCtrlSecret: ctrlSecret})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		writeRead(t, ctx, c)
	})
	t.Run("wrong host secret", func(t *testing.T) {
		_, err := connect(host.Options{DHCHAPSecret: genSecret(t, auth.SHA256, 32)})
		var ae *auth.Error
		if !errors.Is(err, host.ErrAuthentication) || !errors.As(err, &ae) || !ae.Remote || ae.Reason != auth.ReasonFailed {
			t.Fatalf("connect with a wrong secret: %v; want the controller's Failure1 (authentication failed)", err)
		}
	})
	t.Run("wrong controller secret", func(t *testing.T) {
		_, err := connect(host.Options{DHCHAPSecret: secret, DHCHAPCtrlSecret: genSecret(t, 0, 48)})
		var ae *auth.Error
		if !errors.Is(err, host.ErrAuthentication) || !errors.As(err, &ae) || ae.Remote {
			t.Fatalf("connect expecting another controller secret: %v; want the host to refuse the controller", err)
		}
	})
	t.Run("no secret", func(t *testing.T) {
		if _, err := connect(host.Options{}); !errors.Is(err, host.ErrAuthentication) {
			t.Fatalf("connect without a secret: %v", err)
		}
	})
	// After all that, the right host still connects.
	c, err := connect(host.Options{DHCHAPSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	writeRead(t, ctx, c)
	c.Close()
}

// TestAuthHashesAndGroups: every hash and every DH group, each with a
// secret transformed by a different hash, connects and does I/O.
func TestAuthHashesAndGroups(t *testing.T) {
	type combo struct {
		hash  auth.Hash
		group auth.DHGroup
	}
	combos := []combo{{auth.SHA256, auth.DHNull}, {auth.SHA384, auth.FFDHE2048}, {auth.SHA512, auth.FFDHE3072},
		{auth.SHA256, auth.FFDHE4096}, {auth.SHA384, auth.FFDHE6144}, {auth.SHA512, auth.FFDHE8192}}
	secrets := []string{genSecret(t, 0, 64), genSecret(t, auth.SHA256, 32), genSecret(t, auth.SHA384, 48), genSecret(t, auth.SHA512, 64)}
	for i, sec := range secrets {
		addr, _ := serve(t, "--dhchap-secret", authHost+"="+sec, "--dhchap-ctrl-secret", authHost+"="+secrets[(i+1)%len(secrets)])
		for j, cb := range combos {
			if (i+j)%2 != 0 && cb.group != auth.FFDHE8192 {
				continue // every combination with two of the secrets; ffdhe8192 with all
			}
			t.Run(fmt.Sprintf("secret%d/%s/%s", i, cb.hash, cb.group), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				c, err := host.Connect(ctx, addr, subNQN, host.Options{HostNQN: authHost, IOQueues: 2, DialTimeout: 30 * time.Second,
					DHCHAPSecret: sec, DHCHAPCtrlSecret: secrets[(i+1)%len(secrets)],
					DHCHAPHashes: []auth.Hash{cb.hash}, DHCHAPGroups: []auth.DHGroup{cb.group}})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				writeRead(t, ctx, c)
			})
		}
	}
}

// rawQueue is one queue spoken PDU by PDU, to do what a real host would
// not: skip authentication.
type rawQueue struct {
	t   *testing.T
	f   *tcp.Framer
	cid uint16
}

func dialRaw(t *testing.T, addr string) *rawQueue {
	return &rawQueue{t: t, f: dialTCP(t, addr, time.Minute)}
}

// do sends cmd with out in the capsule, or asks for inLen bytes, and
// returns the completion and the data.
func (q *rawQueue) do(cmd *nvme.Command, out []byte, inLen int) (nvme.Completion, []byte) {
	q.cid++
	cmd.CID = q.cid
	cmd.Flags |= nvme.PSDTSGL
	if out != nil {
		cmd.DPTR = nvme.SGL{Length: uint32(len(out)), Type: nvme.SGLDataBlockOffset}
	} else {
		cmd.DPTR = nvme.SGL{Length: uint32(inLen), Type: nvme.SGLTransportDataBlock}
	}
	if err := q.f.WriteCapsuleCmd(cmd, out); err != nil {
		q.t.Fatal(err)
	}
	_ = q.f.Flush()
	in := make([]byte, inLen)
	return awaitCompletion(q.t, q.f, in), in
}

func (q *rawQueue) connect(qid, cntlid uint16) nvme.Completion {
	return q.connectKATO(qid, cntlid, 0)
}

func (q *rawQueue) connectKATO(qid, cntlid uint16, kato uint32) nvme.Completion {
	var cmd nvme.Command
	(&nvme.ConnectCommand{QID: qid, SQSize: 31, KATO: kato}).ToCommand(&cmd)
	data := (&nvme.ConnectData{CNTLID: cntlid, SubNQN: subNQN, HostNQN: authHost, HostID: [16]byte{1}}).Marshal()
	c, _ := q.do(&cmd, data, 0)
	if !c.Status.OK() {
		q.t.Fatalf("connect queue %d: %v", qid, c.Status)
	}
	return c
}

// authenticate runs the host side of DH-HMAC-CHAP on q with nvme/auth.
func (q *rawQueue) authenticate(secret string) {
	s, err := auth.ParseSecret(secret)
	if err != nil {
		q.t.Fatal(err)
	}
	h, err := auth.NewHost(auth.Config{HostNQN: authHost, SubNQN: subNQN, Secret: s})
	if err != nil {
		q.t.Fatal(err)
	}
	msg, _ := h.Start()
	for msg != nil {
		var cmd nvme.Command
		auth.CommandFields(&cmd, true, uint32(len(msg)))
		if c, _ := q.do(&cmd, msg, 0); !c.Status.OK() {
			q.t.Fatalf("Authentication Send: %v", c.Status)
		}
		if h.Done() {
			break
		}
		auth.CommandFields(&cmd, false, auth.MaxMessage)
		c, in := q.do(&cmd, nil, auth.MaxMessage)
		if !c.Status.OK() {
			q.t.Fatalf("Authentication Receive: %v", c.Status)
		}
		if msg, err = h.Step(in); err != nil {
			q.t.Fatal(err)
		}
	}
	if !h.Done() {
		q.t.Fatal("not authenticated")
	}
}

func propGet(q *rawQueue, off uint32, size8 bool) nvme.Status {
	var cmd nvme.Command
	(&nvme.PropertyCommand{Offset: off, Size8: size8}).ToCommand(&cmd, false)
	c, _ := q.do(&cmd, nil, 0)
	return c.Status
}

// TestAuthRequired: a queue that does not authenticate is told so in its
// Connect response (AUTHREQ.ATR) and gets nothing but Authentication
// Required: on the admin queue (properties, Identify), and on an I/O
// queue of an authenticated, enabled controller (a read).
func TestAuthRequired(t *testing.T) {
	secret := genSecret(t, auth.SHA384, 48)
	addr, _ := serve(t, "--dhchap-secret", authHost+"="+secret)
	const atr = 1 << 17

	admin := dialRaw(t, addr)
	c := admin.connect(0, 0xFFFF)
	if c.DW0&atr == 0 {
		t.Fatalf("admin Connect DW0 %#x: no AUTHREQ.ATR", c.DW0)
	}
	cntlid := uint16(c.DW0)
	for _, off := range []uint32{nvme.PropCAP, nvme.PropCSTS} {
		if st := propGet(admin, off, off == nvme.PropCAP); st != nvme.StatusAuthRequired|nvme.DNR {
			t.Fatalf("property %#x before authenticating: %v", off, st)
		}
	}
	var id nvme.Command
	id.Opcode, id.CDW10 = nvme.AdminIdentify, uint32(nvme.CNSController)
	if c, _ := admin.do(&id, nil, nvme.IdentifySize); c.Status != nvme.StatusAuthRequired|nvme.DNR {
		t.Fatalf("Identify before authenticating: %v", c.Status)
	}
	var en nvme.Command
	(&nvme.PropertyCommand{Offset: nvme.PropCC, Value: nvme.CCEnable | 6<<16 | 4<<20}).ToCommand(&en, true)
	if c, _ := admin.do(&en, nil, 0); c.Status != nvme.StatusAuthRequired|nvme.DNR {
		t.Fatalf("enabling before authenticating: %v", c.Status)
	}

	// No I/O queue joins a controller whose admin queue has not
	// authenticated (it cannot have been enabled).
	early := dialRaw(t, addr)
	var ioc nvme.Command
	(&nvme.ConnectCommand{QID: 1, SQSize: 31}).ToCommand(&ioc)
	iod := (&nvme.ConnectData{CNTLID: cntlid, SubNQN: subNQN, HostNQN: authHost, HostID: [16]byte{1}}).Marshal()
	if c, _ := early.do(&ioc, iod, 0); c.Status.OK() {
		t.Fatal("an I/O queue joined a controller whose admin queue has not authenticated")
	}

	// Authenticated, the admin queue works and enables the controller.
	admin.authenticate(secret)
	if c, _ := admin.do(&en, nil, 0); !c.Status.OK() {
		t.Fatalf("enable: %v", c.Status)
	}
	for i := 0; ; i++ {
		var cmd nvme.Command
		(&nvme.PropertyCommand{Offset: nvme.PropCSTS}).ToCommand(&cmd, false)
		if c, _ := admin.do(&cmd, nil, 0); c.Status.OK() && c.DW0&nvme.CSTSReady != 0 {
			break
		}
		if i == 100 {
			t.Fatal("controller never ready")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// An I/O queue of that controller must authenticate too.
	io := dialRaw(t, addr)
	if c := io.connect(1, cntlid); c.DW0&atr == 0 {
		t.Fatalf("I/O Connect DW0 %#x: no AUTHREQ.ATR", c.DW0)
	}
	read := func() nvme.Status {
		var cmd nvme.Command
		cmd.Opcode, cmd.NSID = nvme.IORead, 1
		cmd.SetLBA(0, 1)
		c, _ := io.do(&cmd, nil, 512)
		return c.Status
	}
	if st := read(); st != nvme.StatusAuthRequired|nvme.DNR {
		t.Fatalf("read on an unauthenticated I/O queue: %v", st)
	}
	io.authenticate(secret)
	if st := read(); !st.OK() {
		t.Fatalf("read after authenticating: %v", st)
	}
}

// TestAuthUnauthenticatedExpires: an admin queue that never
// authenticates is closed when its keep-alive timeout (until then at
// least --max-idle) runs out, however many (refused) commands it sends
// meanwhile.
func TestAuthUnauthenticatedExpires(t *testing.T) {
	addr, _ := serve(t, "--dhchap-secret", authHost+"="+genSecret(t, 0, 32), "--max-idle", "2s")
	q := dialRaw(t, addr)
	start := time.Now()
	q.connectKATO(0, 0xFFFF, 1000)
	var cmd nvme.Command
	(&nvme.PropertyCommand{Offset: nvme.PropCAP, Size8: true}).ToCommand(&cmd, false)
	cmd.Flags |= nvme.PSDTSGL
	for i := 0; ; i++ {
		q.cid++
		cmd.CID = q.cid
		// A write to a closed connection may still succeed; the read
		// below tells.
		if q.f.WriteCapsuleCmd(&cmd, nil) == nil {
			_ = q.f.Flush()
		}
		h, err := q.f.ReadHeader()
		if err != nil {
			// Timers do not fire early: before 2 s, it was KATO's.
			if d := time.Since(start); d < 2*time.Second {
				t.Fatalf("closed after %v: at KATO, before --max-idle", d)
			}
			t.Logf("closed after %d refused commands: %v", i, err)
			return
		}
		if h.Type != tcp.TypeCapsuleResp || h.Completion().Status != nvme.StatusAuthRequired|nvme.DNR {
			t.Fatalf("PDU %#x: %v", h.Type, h.Completion().Status)
		}
		if i == 300 {
			t.Fatal("still open after 300 refused commands, 30 s at a 1 s KATO and 2 s --max-idle: they count as keep-alive traffic")
		}
		time.Sleep(100 * time.Millisecond) // well inside the timeouts
	}
}

// TestAuthCLI: auth gen-key prints secrets of nvme gen-dhchap-key's form
// and lengths, refuses a key length its transformation does not make,
// and target serve refuses secrets it cannot use before it listens: for a
// host that may not connect, malformed, or a controller secret alone. The
// host commands take their secret from the environment or a file too.
func TestAuthCLI(t *testing.T) {
	clitest.Binary(t) // built before any Run's timeout starts
	for _, tc := range []struct {
		args []string
		tr   auth.Hash
		n    int
	}{{nil, 0, 32}, {[]string{"--key-length", "64"}, 0, 64}, {[]string{"--hmac", "2", "--nqn", authHost}, auth.SHA384, 48},
		{[]string{"--hmac", "3", "--nqn", authHost}, auth.SHA512, 64}} {
		r := clitest.Run(t, time.Minute, nil, nil, append([]string{"auth", "gen-key"}, tc.args...)...)
		s, err := auth.ParseSecret(strings.TrimSpace(r.Stdout))
		if r.Code != 0 || err != nil || s.Transform != tc.tr || len(s.Key) != tc.n {
			t.Fatalf("gen-key %v: exit %d, %q: %+v, %v", tc.args, r.Code, r.Stdout, s, err)
		}
	}
	if r := clitest.Run(t, time.Minute, nil, nil, "auth", "gen-key", "--hmac", "1", "--key-length", "64", "--nqn", authHost); r.Code == 0 {
		t.Fatalf("gen-key --hmac 1 --key-length 64 succeeded: %s", r.Stdout)
	}
	secret := genSecret(t, 0, 32)
	for _, args := range [][]string{
		{"--allow-host", "nqn.other", "--dhchap-secret", authHost + "=" + secret},
		{"--dhchap-secret", authHost + "=DHHC-1:00:bm90IGEga2V5:"},
		{"--dhchap-secret", secret},
		{"--dhchap-ctrl-secret", authHost + "=" + secret},
		{"--dhchap-dhgroup", "ffdhe1024"},
	} {
		r := clitest.Run(t, time.Minute, nil, nil, append([]string{"target", "serve", "--listen", "127.0.0.1:0", "--volume", "mem:1MiB"}, args...)...)
		if r.Code == 0 || !strings.Contains(r.Stderr, "dhchap") {
			t.Fatalf("target serve %v: exit %d\n%s", args, r.Code, r.Stderr)
		}
	}

	// A secret file for the target, the environment for the host.
	file := t.TempDir() + "/secret"
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, "--dhchap-secret", authHost+"=@"+file)
	verify := func(env []string) clitest.Result {
		return clitest.Run(t, 2*time.Minute, nil, env, "io", "verify", "-a", addr, "-n", subNQN, "--size", "1MiB", "--hostnqn", authHost)
	}
	if r := verify([]string{"NEARSTORE_DHCHAP_SECRET=" + secret}); r.Code != 0 {
		t.Fatalf("io verify with the secret in the environment: exit %d\n%s", r.Code, r.Stderr)
	}
	if r := verify([]string{"NEARSTORE_DHCHAP_SECRET=" + genSecret(t, 0, 32)}); r.Code == 0 || !strings.Contains(r.Stderr, "authentication failed") {
		t.Fatalf("io verify with a wrong secret: exit %d\n%s", r.Code, r.Stderr)
	}
}

package interop_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/nvme/auth"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/tests/interop"
	"github.com/nearstore/nearstore/volume"
)

// TestMain removes the nearstore binary clitest built, if a test did.
func TestMain(m *testing.M) { clitest.Main(m) }

// authCmdline is the kernel command line every auth scenario adds: a
// refused authentication can leave the host's AUTH_Receive unanswered
// (nvmet tears the controller down on failure, racing the reply), and the
// host then waits admin_timeout (default 60 s) before it reports the
// failure; and the kernel's ring buffer holds the authentication debug
// messages of several attempts between reads.
var authCmdline = map[string]string{"nvme_core.admin_timeout": "15", "log_buf_len": "4M"}

// withAuthCmdline returns authCmdline plus kv.
func withAuthCmdline(kv map[string]string) map[string]string {
	m := make(map[string]string, len(authCmdline)+len(kv))
	for k, v := range authCmdline {
		m[k] = v
	}
	for k, v := range kv {
		m[k] = v
	}
	return m
}

// dmesgLines returns the guest's INTEROP-DMESG lines that contain all of
// words.
func dmesgLines(res interop.Result, words ...string) []string {
	var out []string
	for _, l := range res.Lines {
		if !strings.HasPrefix(l, "INTEROP-DMESG") {
			continue
		}
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// TestLinuxAuthSelftest: the harness's own check of DH-HMAC-CHAP, without
// nearstore. In the trixie guest (Linux 6.12: NVME_AUTH, NVME_TARGET_AUTH),
// the kernel's nvmet admits only the guest's host NQN with dhchap_key and
// dhchap_ctrl_key, and the kernel's host connects over loopback with nvme
// connect --dhchap-secret (and --dhchap-ctrl-secret): the right secrets
// connect and move data, uni- and bidirectionally, a wrong host secret and
// a wrong controller secret are refused, for SHA-256 with the null group
// and SHA-512 with ffdhe2048.
func TestLinuxAuthSelftest(t *testing.T) {
	interop.RequireKernel(t, interop.KernelTrixie)
	ctx := t.Context()
	res := interop.Run(ctx, t, "guest", interop.BootOptions{
		Scenario: "auth-selftest",
		Kernel:   interop.KernelTrixie,
		Cmdline:  withAuthCmdline(nil),
	})

	want := []struct{ hash, group string }{{"sha256", "null"}, {"sha512", "ffdhe2048"}}
	if got := res.Values["auth_cases"]; got != fmt.Sprint(len(want)) {
		t.Fatalf("guest ran %q cases, want %d", got, len(want))
	}
	for i, w := range want {
		if got, exp := res.Values[fmt.Sprintf("auth_%d", i+1)], "connected,bi-connected,refused,ctrl-refused"; got != exp {
			t.Errorf("case %d (%s/%s): %q, want %q", i+1, w.hash, w.group, got, exp)
		}
		// The kernel's host says what it authenticated with.
		if l := dmesgLines(res, "authenticated with hash hmac("+w.hash+") dhgroup "+w.group); len(l) == 0 {
			t.Errorf("case %d: no kernel message 'authenticated with hash hmac(%s) dhgroup %s'", i+1, w.hash, w.group)
		}
	}
	// Each refusal is the kernel's authentication failure: nvmet's
	// mismatch for a wrong host secret, the host's own verdict for a wrong
	// controller secret.
	if n := len(dmesgLines(res, "host response mismatch")); n < len(want) {
		t.Errorf("nvmet logged %d host response mismatches, want >= %d", n, len(want))
	}
	if n := len(dmesgLines(res, "controller authentication failed")); n < len(want) {
		t.Errorf("the host logged %d controller authentication failures, want >= %d", n, len(want))
	}
	if n := len(dmesgLines(res, "authentication failed, error")); n < 2*len(want) {
		t.Errorf("the host logged %d failed authentications, want >= %d", n, 2*len(want))
	}
}

// Fixed DH-HMAC-CHAP secrets made by nvme-cli's gen-dhchap-key (so their
// form is Linux's, not ours): the host's is transformed with SHA-256
// (DHHC-1:01), the controller's with SHA-384 (DHHC-1:02); the wrong ones
// have the same forms.
const (
	authHostSecret      = "DHHC-1:01:XFV0V3iLWr051xLiQiRb9M5jxOFSMSmsUy6/IcSmbqnczQ+Z:"
	authCtrlSecret      = "DHHC-1:02:PWSGSf0B3xZI4gQP1Df+cWG+/iyxt3YSX/GpQ1i7+IJLNfGD3xyTNel5Ai6n7RWwOhvp4w==:"
	authWrongHostSecret = "DHHC-1:01:fAHH+5hpeR7/OFquThvrqjhhZtlo6jPadMq2X914sMs20+8s:"
	authWrongCtrlSecret = "DHHC-1:02:pLqnYIPbxg0XDcvb0oh/nNMcTwYplBJD9UwqmnGL6qyf4+XJqmnew5rma6YSHMWYH90a0Q==:"
)

// authChoice is a hash and DH group pair, in Linux's configfs names.
type authChoice struct {
	hash  string // sha256, sha384, sha512
	group string // null, ffdhe2048, ...
	h     auth.Hash
	g     auth.DHGroup
}

// authChoices are the pairs tried in both directions.
var authChoices = []authChoice{
	{"sha256", "null", auth.SHA256, auth.DHNull},
	{"sha256", "ffdhe2048", auth.SHA256, auth.FFDHE2048},
	{"sha512", "ffdhe3072", auth.SHA512, auth.FFDHE3072},
}

// authHost is a fixed host identity, so the NQN the targets admit is known
// before the guest boots.
func authHost() (id [16]byte, idStr, nqn string) {
	id = [16]byte{0x6e, 0x73, 0x61, 0x75, 0x74, 0x68, 0x40, 0x00, 0x80, 0x00, 0, 0, 0, 0, 0, 1}
	idStr = "6e736175-7468-4000-8000-000000000001"
	return id, idStr, "nqn.2014-08.org.nvmexpress:uuid:" + idStr
}

// TestLinuxHostToOurTargetAuth: the Linux kernel's NVMe/TCP host, in the
// trixie guest, authenticates to nearstore targets with nvme connect
// --dhchap-secret (and --dhchap-ctrl-secret, bidirectional): one target
// per hash/DH group pair, each requiring the guest's host NQN to
// authenticate with its secrets, and one more run as a `nearstore target serve` process
// configured by its flags (--allow-host, --dhchap-secret,
// --dhchap-ctrl-secret, --dhchap-hash sha384, --dhchap-dhgroup ffdhe4096).
// The right secrets connect and a MiB written through each connection is
// on the target; a wrong host secret and a wrong controller secret are
// refused, and the kernel says authentication failed.
func TestLinuxHostToOurTargetAuth(t *testing.T) {
	interop.RequireKernel(t, interop.KernelTrixie)
	const nqn = "nqn.2026-11.io.nearstore:interop-auth"
	hostIDBytes, hostID, hostNQN := authHost()

	type tgt struct {
		hash, group string
		port        int
		// readAt reads the target's namespace 1 after the guest is done.
		readAt func(b []byte, off int64) error
	}
	var tgts []*tgt
	for _, c := range authChoices {
		vol, err := volume.Open("mem:16MiB")
		if err != nil {
			t.Fatal(err)
		}
		defer vol.Close()
		srv := testtarget.Start(t, testtarget.Config{NQN: nqn, Name: "auth-" + c.group, Volume: vol,
			DHCHAP:       map[string]target.DHCHAPKeys{hostNQN: {Secret: authHostSecret, CtrlSecret: authCtrlSecret}},
			DHCHAPHashes: []auth.Hash{c.h},
			DHCHAPGroups: []auth.DHGroup{c.g},
		})
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		}()
		_, p, _ := net.SplitHostPort(srv.Addr())
		port, _ := strconv.Atoi(p)
		tgts = append(tgts, &tgt{hash: c.hash, group: c.group, port: port,
			readAt: func(b []byte, off int64) error { _, err := vol.ReadAt(b, off); return err }})
	}

	// The same through the command line, as its own process.
	cliPort, err := interop.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cliAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(cliPort))
	clitest.Serve(t, cliAddr, "target", "serve", "--listen", cliAddr, "--nqn", nqn, "--volume", "mem:16MiB",
		"--allow-host", hostNQN,
		"--dhchap-secret", hostNQN+"="+authHostSecret, "--dhchap-ctrl-secret", hostNQN+"="+authCtrlSecret,
		"--dhchap-hash", "sha384", "--dhchap-dhgroup", "ffdhe4096")
	tgts = append(tgts, &tgt{hash: "sha384", group: "ffdhe4096", port: cliPort,
		readAt: func(b []byte, off int64) error {
			// nearstore's host, authenticated too, reads what the kernel wrote.
			ctrl, err := host.Connect(t.Context(), cliAddr, nqn, host.Options{HostID: hostIDBytes, HostNQN: hostNQN, DHCHAPSecret: authHostSecret})
			if err != nil {
				return err
			}
			defer ctrl.Close()
			ns, err := ctrl.Namespace(1)
			if err != nil {
				return err
			}
			_, err = ns.ReadAt(b, off)
			return err
		}})
	var ports []string
	for _, tg := range tgts {
		ports = append(ports, strconv.Itoa(tg.port))
	}

	ctx := t.Context()
	res := interop.Run(ctx, t, "guest", interop.BootOptions{
		Scenario: "auth-host",
		Kernel:   interop.KernelTrixie,
		Cmdline: withAuthCmdline(map[string]string{
			"nqn": nqn, "ports": strings.Join(ports, ","),
			"hostnqn": hostNQN, "hostid": hostID,
			"host_key": authHostSecret, "ctrl_key": authCtrlSecret,
		}),
	})

	for i, tg := range tgts {
		name := tg.hash + "/" + tg.group
		if got, want := res.Values[fmt.Sprintf("auth_%d", tg.port)], "connected,bi-connected,refused,ctrl-refused"; got != want {
			t.Errorf("%s: guest reports %q, want %q", name, got, want)
		}
		if l := dmesgLines(res, "authenticated with hash hmac("+tg.hash+") dhgroup "+tg.group); len(l) == 0 {
			t.Errorf("%s: the kernel never said 'authenticated with hash hmac(%s) dhgroup %s'", name, tg.hash, tg.group)
		}
		// What the kernel wrote through the authenticated connections is
		// on this target's volume: 1 MiB unidirectional, 1 MiB bidirectional.
		base := int64(i*2+1) << 20
		n := 0
		for _, r := range res.MD5 {
			if r.Offset < base || r.Offset >= base+2<<20 {
				continue
			}
			n++
			b := make([]byte, r.Length)
			if err := tg.readAt(b, r.Offset); err != nil {
				t.Fatalf("%s: reading the target: %v", name, err)
			}
			if sum := md5.Sum(b); hex.EncodeToString(sum[:]) != r.MD5 {
				t.Errorf("%s: bytes [%d, +%d) on the target have md5 %x, the guest wrote %s", name, r.Offset, r.Length, sum, r.MD5)
			}
		}
		if n != 2 {
			t.Errorf("%s: guest reported %d written regions, want 2", name, n)
		}
	}
	if n := len(dmesgLines(res, "authentication failed")); n < 2*len(tgts) {
		t.Errorf("the kernel logged %d authentication failures, want >= %d", n, 2*len(tgts))
	}
}

// TestOurHostToLinuxTargetAuth: nearstore's host authenticates to the
// Linux kernel's target (nvmet in the trixie guest with dhchap_key and
// dhchap_ctrl_key for our host NQN, reached through a hostfwd port), for
// each hash/DH group pair, set through the guest's control port: the right
// secret connects and writes what the guest's backing file then holds,
// with the controller secret too (bidirectional); a wrong host secret and
// a wrong controller secret fail with host.ErrAuthentication.
func TestOurHostToLinuxTargetAuth(t *testing.T) {
	interop.RequireKernel(t, interop.KernelTrixie)
	const nqn = "nqn.2026-11.io.nearstore:interop-linux-auth"
	hostID, _, hostNQN := authHost()
	ctx := t.Context()
	g, err := interop.Boot(ctx, interop.BootOptions{
		Scenario: "ours-to-linux",
		Kernel:   interop.KernelTrixie,
		Cmdline: withAuthCmdline(map[string]string{
			"nqn": nqn, "ns_size_mb": "16", "auth_host": hostNQN,
			"dhchap_key": authHostSecret, "dhchap_ctrl_key": authCtrlSecret,
		}),
		HostFwd: map[int]int{interop.GuestNVMePort: 0, interop.GuestControlPort: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	if _, err := g.WaitFor(ctx, "INTEROP-READY"); err != nil {
		t.Fatalf("guest target: %v", err)
	}
	addr := g.HostAddr(interop.GuestNVMePort)
	// kernelSays prints the guest kernel's NVMe messages since the last
	// call (dynamic debug: each step, the values nvmet computed).
	kernelSays := func() string {
		if _, err := g.Control(ctx, "dmesg"); err != nil {
			return fmt.Sprintf("(no dmesg: %v)", err)
		}
		var out []string
		for _, l := range strings.Split(g.Tail(400), "\n") {
			if strings.Contains(l, "INTEROP-DMESG") {
				out = append(out, l)
			}
		}
		if len(out) > 60 {
			out = out[len(out)-60:]
		}
		return strings.Join(out, "\n")
	}
	opts := func(secret, ctrlSecret string) host.Options {
		return host.Options{HostID: hostID, HostNQN: hostNQN, IOQueues: 2, DHCHAPSecret: secret, DHCHAPCtrlSecret: ctrlSecret}
	}

	// Without a secret, Linux refuses us.
	if c, err := host.Connect(ctx, addr, nqn, opts("", "")); err == nil {
		c.Close()
		t.Errorf("connected to a Linux target requiring DH-HMAC-CHAP without a secret")
	} else if !errors.Is(err, host.ErrAuthentication) {
		t.Errorf("no secret: %v, want host.ErrAuthentication", err)
	}

	for i, c := range authChoices {
		t.Run(c.hash+"/"+c.group, func(t *testing.T) {
			if got, err := g.Control(ctx, "auth "+c.hash+" "+c.group); err != nil {
				t.Fatal(err)
			} else {
				t.Logf("nvmet: %s", got)
			}
			for j, bidi := range []bool{false, true} {
				ctrlSecret := ""
				if bidi {
					ctrlSecret = authCtrlSecret
				}
				ctrl, err := host.Connect(ctx, addr, nqn, opts(authHostSecret, ctrlSecret))
				if err != nil {
					t.Fatalf("connect (bidirectional %v): %v\nguest kernel:\n%s", bidi, err, kernelSays())
				}
				ns, err := ctrl.Namespace(1)
				if err != nil {
					ctrl.Close()
					t.Fatal(err)
				}
				b := make([]byte, 1<<20)
				if _, err := rand.Read(b); err != nil {
					t.Fatal(err)
				}
				off := int64(i*2+j) << 20
				if _, err := ns.WriteAt(b, off); err != nil {
					ctrl.Close()
					t.Fatalf("write (bidirectional %v): %v\nguest kernel:\n%s", bidi, err, kernelSays())
				}
				got := make([]byte, len(b))
				if _, err := ns.ReadAt(got, off); err != nil {
					ctrl.Close()
					t.Fatal(err)
				}
				ctrl.Close()
				if !bytes.Equal(got, b) {
					t.Fatalf("read back differs (bidirectional %v)", bidi)
				}
				sum := md5.Sum(b)
				out, err := g.Control(ctx, fmt.Sprintf("md5 %d %d", off, len(b)))
				if err != nil {
					t.Fatal(err)
				}
				if out != hex.EncodeToString(sum[:]) {
					t.Fatalf("guest's backing file has md5 %s at %d, we wrote %x", out, off, sum)
				}
			}
			for _, bad := range []struct{ what, secret, ctrl string }{
				{"wrong host secret", authWrongHostSecret, ""},
				{"wrong controller secret", authHostSecret, authWrongCtrlSecret},
			} {
				ctrl, err := host.Connect(ctx, addr, nqn, opts(bad.secret, bad.ctrl))
				if err == nil {
					ctrl.Close()
					t.Errorf("%s: connected", bad.what)
					continue
				}
				if !errors.Is(err, host.ErrAuthentication) {
					t.Errorf("%s: %v, want host.ErrAuthentication\nguest kernel:\n%s", bad.what, err, kernelSays())
				} else {
					t.Logf("%s: %v", bad.what, err)
				}
			}
			// The kernel's own verdicts, for the record and the checks.
			says := kernelSays()
			if !strings.Contains(says, "host response mismatch") {
				t.Errorf("nvmet did not log a host response mismatch for the wrong host secret:\n%s", says)
			}
		})
	}
	if _, err := g.Control(ctx, "stop"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Wait(ctx); err != nil {
		t.Fatalf("guest: %v", err)
	}
}

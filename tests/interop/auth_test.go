package interop_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/tests/interop"
)

// authCmdline is the kernel command line every auth scenario adds: a
// refused authentication can leave the host's AUTH_Receive unanswered
// (nvmet tears the controller down on failure, racing the reply), and the
// host then waits admin_timeout (default 60 s) before it reports the
// failure.
var authCmdline = map[string]string{"nvme_core.admin_timeout": "15"}

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
// the kernel's nvmet admits only the guest's host NQN with dhchap_key (and
// dhchap_ctrl_key), and the kernel's host connects over loopback with nvme
// connect --dhchap-secret (--dhchap-ctrl-secret): the right secrets connect
// and move data, a wrong host secret and a wrong controller secret are
// refused, for SHA-256 and SHA-512 with the null group and ffdhe2048.
func TestLinuxAuthSelftest(t *testing.T) {
	interop.RequireKernel(t, interop.KernelTrixie)
	ctx := t.Context()
	g, err := interop.Boot(ctx, interop.BootOptions{
		Scenario: "auth-selftest",
		Kernel:   interop.KernelTrixie,
		Cmdline:  withAuthCmdline(nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	res, err := g.Wait(ctx)
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	t.Logf("guest passed in %s (log %s)", res.Duration.Round(time.Second), res.LogPath)

	want := []struct{ hash, group, dir, result string }{
		{"sha256", "null", "uni", "connected,refused"},
		{"sha256", "null", "bi", "connected,refused,ctrl-refused"},
		{"sha256", "ffdhe2048", "uni", "connected,refused"},
		{"sha512", "ffdhe2048", "bi", "connected,refused,ctrl-refused"},
	}
	if got := res.Values["auth_cases"]; got != fmt.Sprint(len(want)) {
		t.Fatalf("guest ran %q cases, want %d", got, len(want))
	}
	for i, w := range want {
		if got, exp := res.Values[fmt.Sprintf("auth_%d", i+1)], w.hash+"/"+w.group+"/"+w.dir+":"+w.result; got != exp {
			t.Errorf("case %d: %q, want %q", i+1, got, exp)
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
	if n := len(dmesgLines(res, "controller authentication failed")); n < 2 {
		t.Errorf("the host logged %d controller authentication failures, want >= 2", n)
	}
	if n := len(dmesgLines(res, "authentication failed, error")); n < len(want)+2 {
		t.Errorf("the host logged %d failed authentications, want >= %d", n, len(want)+2)
	}
}

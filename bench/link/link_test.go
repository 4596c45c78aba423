package link

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/bench/proc"
	"github.com/nearstore/nearstore/internal/syncbuf"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		bits uint64
		norm string
		bad  bool
	}{
		{in: "10gbit", bits: 10e9, norm: "10gbit"},
		{in: "25gbit", bits: 25e9, norm: "25gbit"},
		{in: "1gbit", bits: 1e9, norm: "1gbit"},
		{in: "500mbit", bits: 500e6, norm: "500mbit"},
		{in: "10Gbit", bits: 10e9, norm: "10gbit"}, // tc ignores case
		{in: " 2.5gbit ", bits: 2.5e9, norm: "2500mbit"},
		{in: "1000mbit", bits: 1e9, norm: "1gbit"},
		{in: "100mbps", bits: 800e6, norm: "800mbit"}, // bps: bytes per second
		{in: "1gbps", bits: 8e9, norm: "8gbit"},
		{in: "1gibit", bits: 1 << 30, norm: "1073741824bit"},
		{in: "1kibps", bits: 8 << 10, norm: "8192bit"},
		{in: "64kbit", bits: 64e3, norm: "64kbit"},
		{in: "1tbit", bits: 1e12, norm: "1tbit"},
		{in: "8bit", bits: 8, norm: "8bit"},
		{in: "10", bad: true},      // bare number: tc says bits, people mean bytes
		{in: "10g", bad: true},     // no unit
		{in: "10gb", bad: true},    // bits or bytes?
		{in: "10 gbit", bad: true}, // tc wants it in one word
		{in: "gbit", bad: true},
		{in: "-1gbit", bad: true},
		{in: "0gbit", bad: true},
		{in: "1e3mbit", bad: true},
		{in: "0x10gbit", bad: true},
		{in: "infgbit", bad: true},
		{in: "nanmbit", bad: true},
		{in: "2tbit", bad: true},
		{in: "1bit", bad: true}, // below a byte per second
		{in: "", bad: true},
	} {
		bits, norm, err := ParseRate(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseRate(%q) = %d, %q; want an error", tc.in, bits, norm)
			}
			continue
		}
		if err != nil || bits != tc.bits || norm != tc.norm {
			t.Errorf("ParseRate(%q) = %d, %q, %v; want %d, %q", tc.in, bits, norm, err, tc.bits, tc.norm)
		}
	}
}

func TestLinkLoopback(t *testing.T) {
	for _, rate := range []string{"", "loopback", "Loopback"} {
		l, err := Open(t.Context(), rate, nil)
		if err != nil {
			t.Fatal(err)
		}
		if l.Shaped() || l.Fallback() != "" || l.Rate() != "" || l.Netns() != "" || l.TargetIP() != "127.0.0.1" || l.String() != "loopback" {
			t.Errorf("Open(%q) = %v shaped %v fallback %q rate %q netns %q target %q", rate, l, l.Shaped(), l.Fallback(), l.Rate(), l.Netns(), l.TargetIP())
		}
		exchange(t, l, 1<<20)
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}
	if _, err := Open(t.Context(), "10gb", nil); err == nil {
		t.Error("Open accepted a malformed rate")
	}
}

// openShaped opens a shaped link, or skips the test when the machine
// cannot make one, saying why (and only then).
func openShaped(t *testing.T, rate string) *Link {
	t.Helper()
	var logBuf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	l, err := Open(t.Context(), rate, log)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Shaped() {
		if l.Fallback() == "" {
			t.Fatalf("Open(%q) fell back to loopback without saying why", rate)
		}
		if !strings.Contains(logBuf.String(), "level=WARN") || !strings.Contains(logBuf.String(), l.Fallback()) {
			t.Errorf("fallback not logged at warn level: %s", logBuf.String())
		}
		if l.TargetIP() != "127.0.0.1" || !strings.HasPrefix(l.String(), "loopback (asked for "+rate+": ") {
			t.Errorf("fallback link: target %q, String %q", l.TargetIP(), l.String())
		}
		t.Skipf("no shaped link on this machine: %s", l.Fallback())
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("closing the link: %v", err)
		}
	})
	return l
}

// exchange sends n bytes to a listener from l.Listen and has it send back
// n bytes derived from them, checking both arrive intact and that the
// connection runs between the link's two addresses. It returns the
// listener's port.
func exchange(t *testing.T, l *Link, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ln, err := l.Listen(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := ln.Addr().(*net.TCPAddr).IP.String(); got != l.TargetIP() {
		t.Fatalf("listening on %s, want %s", got, l.TargetIP())
	}
	payload := make([]byte, n)
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	// The target's side hashes what it got and answers with the payload
	// reversed, so what comes back could only have been made from what
	// was sent.
	type served struct {
		sum    [32]byte
		remote string
		err    error
	}
	done := make(chan served, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- served{err: err}
			return
		}
		defer c.Close()
		got := make([]byte, n)
		if _, err := io.ReadFull(c, got); err != nil {
			done <- served{err: err}
			return
		}
		for i, j := 0, len(got)-1; i < j; i, j = i+1, j-1 {
			got[i], got[j] = got[j], got[i]
		}
		_, err = c.Write(got)
		done <- served{sum: sha256.Sum256(got), remote: c.RemoteAddr().(*net.TCPAddr).IP.String(), err: err}
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() { _, _ = c.Write(payload) }()
	back := make([]byte, n)
	if _, err := io.ReadFull(c, back); err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	s := <-done
	if s.err != nil {
		t.Fatalf("target side: %v", s.err)
	}
	for i := range back {
		if back[i] != payload[n-1-i] {
			t.Fatalf("answer differs at byte %d", i)
		}
	}
	if s.sum != sha256.Sum256(back) {
		t.Fatal("the target's side did not see what came back")
	}
	if s.remote != l.HostIP() {
		t.Errorf("the target saw a connection from %s, want %s", s.remote, l.HostIP())
	}
}

var tcSentRE = regexp.MustCompile(`Sent (\d+) bytes`)

// qdiscShow returns tc's statistics for dev (in netns, if set) and the
// bytes its root qdisc has sent.
func qdiscShow(t *testing.T, netns, dev string) (string, int64) {
	t.Helper()
	args := []string{"-s", "qdisc", "show", "dev", dev}
	if netns != "" {
		args = append([]string{"-n", netns}, args...)
	}
	tc, err := proc.LookSbin("tc")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), tc, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("tc %v: %v: %s", args, err, out)
	}
	m := tcSentRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no sent bytes in %s", out)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return string(out), n
}

func linkExists(t *testing.T, netns, dev string) (nsThere, devThere bool) {
	t.Helper()
	ip, err := proc.LookSbin("ip")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), ip, "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == netns {
			nsThere = true
		}
	}
	err = exec.CommandContext(t.Context(), ip, "link", "show", dev).Run()
	return nsThere, err == nil
}

func TestLinkShaped(t *testing.T) {
	l := openShaped(t, "10gbit")
	if l.Rate() != "10gbit" || l.BitsPerSecond() != 10e9 || l.Fallback() != "" || l.Netns() == "" || l.HostDev() == "" {
		t.Fatalf("link %v: rate %q fallback %q netns %q dev %q", l, l.Rate(), l.Fallback(), l.Netns(), l.HostDev())
	}
	if want := "10gbit (tc tbf on a veth pair; target in netns " + l.Netns() + ")"; l.String() != want {
		t.Errorf("String() = %q, want %q", l.String(), want)
	}
	for _, a := range []string{l.HostIP(), l.TargetIP()} {
		if ip, err := netip.ParseAddr(a); err != nil || !netip.MustParsePrefix("10.0.0.0/8").Contains(ip) {
			t.Errorf("link address %q is not in 10.0.0.0/8", a)
		}
	}
	hostBefore, sentHost := qdiscShow(t, "", l.HostDev())
	_, sentPeer := qdiscShow(t, l.Netns(), "veth0")
	for _, out := range []string{hostBefore} {
		if !strings.Contains(out, "qdisc tbf") || !strings.Contains(out, "rate 10Gbit") {
			t.Errorf("host end not shaped by tbf at 10Gbit: %s", out)
		}
	}
	peerStats, _ := qdiscShow(t, l.Netns(), "veth0")
	if !strings.Contains(peerStats, "qdisc tbf") || !strings.Contains(peerStats, "rate 10Gbit") {
		t.Errorf("namespace end not shaped by tbf at 10Gbit: %s", peerStats)
	}

	const n = 8 << 20
	exchange(t, l, n)
	_, sentHost2 := qdiscShow(t, "", l.HostDev())
	_, sentPeer2 := qdiscShow(t, l.Netns(), "veth0")
	if sentHost2-sentHost < n {
		t.Errorf("host end's tbf sent %d bytes for a %d-byte payload", sentHost2-sentHost, n)
	}
	if sentPeer2-sentPeer < n {
		t.Errorf("namespace end's tbf sent %d bytes for a %d-byte answer", sentPeer2-sentPeer, n)
	}

	// Measurements cross the shaped pair too, both ways.
	for _, dir := range []Direction{HostToTarget, TargetToHost} {
		_, before := qdiscShow(t, "", l.HostDev())
		_, beforePeer := qdiscShow(t, l.Netns(), "veth0")
		r, err := Measure(t.Context(), l, dir, 200*time.Millisecond, 2)
		if err != nil {
			t.Fatal(err)
		}
		_, after := qdiscShow(t, "", l.HostDev())
		_, afterPeer := qdiscShow(t, l.Netns(), "veth0")
		sent := after - before
		if dir == TargetToHost {
			sent = afterPeer - beforePeer
		}
		if r.Bytes <= 0 || r.Gbps <= 0 || r.Streams != 2 || r.Direction != dir.String() || sent < r.Bytes {
			t.Errorf("%s: %+v, sending end's tbf sent %d bytes", dir, r, sent)
		}
	}

	netns, dev := l.Netns(), l.HostDev()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if nsThere, devThere := linkExists(t, netns, dev); nsThere || devThere {
		t.Errorf("after Close: netns %s there %v, veth %s there %v", netns, nsThere, dev, devThere)
	}
}

// TestLinkProcessInNetns starts programs with ProcessSpec.Netns: they see
// only the namespace's interfaces, and Pid is the program's own.
func TestLinkProcessInNetns(t *testing.T) {
	l := openShaped(t, "1gbit")
	ip, err := proc.LookSbin("ip")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p, err := proc.Start(t.Context(), proc.Spec{Path: ip, Args: []string{"-o", "link"}, Netns: l.Netns(), Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for line := range strings.Lines(out.String()) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		names = append(names, name)
	}
	if strings.Join(names, ",") != "lo,veth0" {
		t.Errorf("inside the namespace ip -o link shows %v, want lo and veth0:\n%s", names, out.String())
	}

	for _, cpus := range []string{"", "0"} {
		var pidOut bytes.Buffer
		p, err := proc.Start(t.Context(), proc.Spec{Name: "sh", Path: "/bin/sh", Args: []string{"-c", "echo $$"}, Netns: l.Netns(), CPUs: cpus, Stdout: &pidOut})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(pidOut.String()); got != strconv.Itoa(p.Pid()) {
			t.Errorf("CPUs %q: the program's pid is %s, Pid() %d", cpus, got, p.Pid())
		}
	}
}

// TestLinkTwoAtOnce opens two links concurrently: they get their own
// namespaces, devices and subnets, and each carries its own traffic.
func TestLinkTwoAtOnce(t *testing.T) {
	probe := openShaped(t, "1gbit") // skips where links cannot be made
	if err := probe.Close(); err != nil {
		t.Fatal(err)
	}
	links := make([]*Link, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range links {
		wg.Go(func() { links[i], errs[i] = Open(t.Context(), "2gbit", nil) })
	}
	wg.Wait()
	for i, l := range links {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(func() { _ = l.Close() })
		if !l.Shaped() {
			t.Fatalf("link %d not shaped: %s", i, l.Fallback())
		}
	}
	a, b := links[0], links[1]
	if a.Netns() == b.Netns() || a.HostDev() == b.HostDev() {
		t.Fatalf("links share a namespace or device: %s/%s, %s/%s", a.Netns(), a.HostDev(), b.Netns(), b.HostDev())
	}
	pa := netip.PrefixFrom(netip.MustParseAddr(a.TargetIP()), 30).Masked()
	pb := netip.PrefixFrom(netip.MustParseAddr(b.TargetIP()), 30).Masked()
	if pa.Overlaps(pb) {
		t.Fatalf("links share a subnet: %s, %s", pa, pb)
	}
	for _, l := range links {
		exchange(t, l, 1<<20)
	}
}

func TestMeasureLinkLoopback(t *testing.T) {
	l, err := Open(t.Context(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []Direction{HostToTarget, TargetToHost} {
		r, err := Measure(t.Context(), l, dir, 100*time.Millisecond, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Bytes <= 0 || r.Seconds <= 0 || r.Gbps <= 0 || r.Direction != dir.String() {
			t.Errorf("%s: %+v", dir, r)
		}
	}
	if _, err := Measure(t.Context(), l, HostToTarget, 0, 1); err == nil {
		t.Error("Measure accepted a zero duration")
	}
}

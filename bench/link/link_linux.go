package link

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nearstore/nearstore/bench/proc"
	"golang.org/x/sys/unix"
)

// netnsDir is where ip(8) keeps named network namespaces (bind mounts of
// /proc/PID/ns/net), which Listen opens to enter one.
const netnsDir = "/var/run/netns"

// netnsPrefix starts the name of every namespace Open makes; the
// creating process's pid follows, so stale ones can be recognized.
const netnsPrefix = "nearstore-"

// peerDev is the veth end's name inside the namespace. It is created
// there directly (ip link add ... peer name veth0 netns NS), so it never
// meets the root namespace's names.
const peerDevName = "veth0"

// Shaping parameters. tbf lets a burst of up to `burst` bytes through at
// once and then refills its bucket at the rate. Two lower bounds apply:
//
//   - tc-tbf(8): to reach the configured rate, burst must be at least
//     rate/HZ, the bytes the rate allows in one timer tick; a smaller
//     bucket empties before the watchdog refills it and the link runs
//     slow. HZ is read from the kernel's config when it is exposed, else
//     100, the lowest common value and so the safe (larger) bound.
//   - A packet larger than burst can never be sent whole; tbf then splits
//     GSO packets into MTU-sized segments in software, which costs CPU and
//     defeats GSO. veth hands TCP's GSO packets of up to gso_max_size
//     (64 KiB unless BIG TCP is turned on) to the qdisc, so burst is at
//     least minBurst, a few of those.
//
// Measured on a 2-CPU VM (HZ=250) at 10gbit, one TCP stream, 2 s: burst
// 256 KiB gave 8.9–9.4 Gbit/s of TCP payload, 1 MiB 9.2–9.5, and rate/HZ
// (5 MB) 9.57–9.58, which is the most TCP can carry: tbf counts whole
// frames, and 1448 payload bytes travel in 1514-byte frames (0.956).
//
// tbf accounts a GSO packet as the bytes of all its segments including
// their headers (qdisc_pkt_len), so GSO and TSO stay on: shaping is exact
// with them, while without them (gso_max_segs 1; ethtool is not
// installed) the same link carried only 0.45–0.84 Gbit/s, CPU-bound.
//
// The cost of the rate/HZ burst is that after an idle period the first
// burst bytes go at memory speed: 5 MB at 10gbit with HZ=250, 4 ms of the
// link's time. Benchmarks that move much more than that per measurement
// see the rate.
const (
	minBurst = 256 << 10
	// tbfLatency bounds how long a packet may wait in tbf's queue; the
	// queue holds rate*latency bytes beyond the burst. TCP's small-queue
	// limit keeps each socket's queued bytes well below that, so the
	// queue only needs to be deep enough not to drop what a few streams
	// queue at once.
	tbfLatency = "20ms"
	defaultHZ  = 100
)

// linkSys is what a Link needs on Linux to build and remove itself.
type linkSys struct {
	ipPath, tcPath string
	peerDev        string // the veth end inside the namespace
}

// setup builds the shaped link: namespace, veth pair, addresses, tbf on
// both ends. On failure it removes what it made and says what failed.
func (l *Link) setup(ctx context.Context) error {
	var err error
	if l.sys.ipPath, err = proc.LookSbin("ip"); err != nil {
		return err
	}
	if l.sys.tcPath, err = proc.LookSbin("tc"); err != nil {
		return err
	}
	l.cleanStale(ctx)

	pid := os.Getpid()
	var name string
	for range 8 {
		suffix := fmt.Sprintf("%04x", rand.Uint32N(1<<16))
		name = netnsPrefix + strconv.Itoa(pid) + "-" + suffix
		if _, err := os.Stat(filepath.Join(netnsDir, name)); errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if err := l.ip(ctx, "netns", "add", name); err != nil {
		return err
	}
	l.netns = name
	l.hostDev = hostDevName(name)
	l.sys.peerDev = peerDevName
	if err := l.configure(ctx); err != nil {
		// Remove what was made even if ctx is what ended the setup.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = l.teardown(tctx)
		l.netns, l.hostDev, l.hostIP, l.targetIP = "", "", "", ""
		return err
	}
	return nil
}

// hostDevName derives the root namespace's veth name from the namespace's
// name ("nearstore-PID-XXXX" → "nsPID-XXXX", at most 15 bytes: IFNAMSIZ),
// so stale pairs can be found from stale namespaces.
func hostDevName(netns string) string {
	return "ns" + strings.TrimPrefix(netns, netnsPrefix)
}

func (l *Link) configure(ctx context.Context) error {
	if err := l.ip(ctx, "link", "add", l.hostDev, "type", "veth", "peer", "name", l.sys.peerDev, "netns", l.netns); err != nil {
		return err
	}
	host, target, err := pickSubnet(ctx, l.sys.ipPath)
	if err != nil {
		return err
	}
	l.hostIP, l.targetIP = host.String(), target.String()
	steps := [][]string{
		{"addr", "add", l.hostIP + "/30", "dev", l.hostDev},
		{"link", "set", l.hostDev, "up"},
		{"-n", l.netns, "addr", "add", l.targetIP + "/30", "dev", l.sys.peerDev},
		{"-n", l.netns, "link", "set", l.sys.peerDev, "up"},
		{"-n", l.netns, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := l.ip(ctx, s...); err != nil {
			return err
		}
	}
	l.burst = max(l.bits/8/uint64(kernelHZ()), minBurst)
	tbf := []string{"qdisc", "add", "dev", "", "root", "tbf", "rate", strconv.FormatUint(l.bits, 10) + "bit",
		"burst", strconv.FormatUint(l.burst, 10), "latency", tbfLatency}
	tbf[3] = l.hostDev
	if err := l.tc(ctx, tbf...); err != nil {
		return err
	}
	tbf[3] = l.sys.peerDev
	return l.tc(ctx, append([]string{"-n", l.netns}, tbf...)...)
}

// teardown deletes the host's veth end (which takes its peer with it) and
// then the namespace. Things already gone are not errors.
func (l *Link) teardown(ctx context.Context) error {
	return removeLink(ctx, l.sys.ipPath, l.netns, l.hostDev)
}

func removeLink(ctx context.Context, ipPath, netns, hostDev string) error {
	var errs []error
	if hostDev != "" {
		if err := run(ctx, ipPath, "link", "del", hostDev); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			errs = append(errs, err)
		}
	}
	if netns != "" {
		if err := run(ctx, ipPath, "netns", "del", netns); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cleanStale removes namespaces (and their veth pairs) left by processes
// that made them with Open and died without closing them. It only
// looks at names it would make itself and only at dead pids; failures
// are logged, not returned: they do not stop this link.
func (l *Link) cleanStale(ctx context.Context) {
	ents, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), netnsPrefix)
		if !ok {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // alive (or not ours to judge)
		}
		if err := removeLink(ctx, l.sys.ipPath, e.Name(), hostDevName(e.Name())); err != nil {
			l.log.Warn("bench: removing a stale link namespace", "netns", e.Name(), "err", err)
			continue
		}
		l.log.Info("bench: removed a stale link namespace", "netns", e.Name(), "pid", pid)
	}
}

// pickSubnet picks a /30 in 10.0.0.0/8 that overlaps no address or route
// this namespace has, and returns its two usable addresses.
func pickSubnet(ctx context.Context, ipPath string) (host, target netip.Addr, err error) {
	var used []netip.Prefix
	addrs, err := output(ctx, ipPath, "-o", "-4", "addr", "show")
	if err != nil {
		return host, target, err
	}
	for line := range strings.Lines(addrs) {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" {
				if p, err := netip.ParsePrefix(f[i+1]); err == nil {
					used = append(used, p.Masked())
				}
			}
		}
	}
	routes, err := output(ctx, ipPath, "-4", "route", "show", "table", "all")
	if err != nil {
		return host, target, err
	}
	for line := range strings.Lines(routes) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		dst := f[0]
		switch dst {
		case "unicast", "local", "broadcast", "multicast", "anycast", "unreachable", "blackhole", "prohibit", "throw", "nat":
			if len(f) < 2 {
				continue
			}
			dst = f[1]
		}
		if dst == "default" {
			continue // a default route covers everything; it is not a collision
		}
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if p, err := netip.ParsePrefix(dst); err == nil {
			used = append(used, p.Masked())
		}
	}
	for range 1000 {
		v := rand.Uint32N(1<<22) << 2 // a /30 within 10.0.0.0/8
		base := netip.AddrFrom4([4]byte{10, byte(v >> 16), byte(v >> 8), byte(v)})
		cand := netip.PrefixFrom(base, 30)
		if !overlapsAny(cand, used) {
			host = base.Next()
			return host, host.Next(), nil
		}
	}
	return host, target, errors.New("no free /30 in 10.0.0.0/8")
}

func overlapsAny(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if u.Overlaps(p) {
			return true
		}
	}
	return false
}

// kernelHZ returns the kernel's timer frequency from /proc/config.gz when
// the kernel exposes its config, else defaultHZ.
func kernelHZ() int {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return defaultHZ
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return defaultHZ
	}
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CONFIG_HZ="); ok {
			if hz, err := strconv.Atoi(v); err == nil && hz > 0 {
				return hz
			}
		}
	}
	return defaultHZ
}

func (l *Link) ip(ctx context.Context, args ...string) error { return run(ctx, l.sys.ipPath, args...) }
func (l *Link) tc(ctx context.Context, args ...string) error { return run(ctx, l.sys.tcPath, args...) }

// run runs an administration command, failing with its standard error.
func run(ctx context.Context, path string, args ...string) error {
	_, err := output(ctx, path, args...)
	return err
}

func output(ctx context.Context, path string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			return "", fmt.Errorf("%s %s: %w", filepath.Base(path), strings.Join(args, " "), err)
		}
		return "", fmt.Errorf("%s %s: %s: %w", filepath.Base(path), strings.Join(args, " "), msg, err)
	}
	return string(out), nil
}

// listenNetns makes a listening socket inside the link's namespace. A
// namespace belongs to a thread, so a goroutine locked to its thread
// enters it, listens, and goes back. If it cannot go back, it leaves the
// thread locked: the runtime then ends the thread with the goroutine
// rather than run other goroutines in the wrong namespace.
func (l *Link) listenNetns(ctx context.Context, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ln, restored, err := listenIn(ctx, filepath.Join(netnsDir, l.netns), addr)
		if restored {
			runtime.UnlockOSThread()
		}
		ch <- result{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, fmt.Errorf("bench: listening on %s in netns %s: %w", addr, l.netns, r.err)
	}
	return r.ln, nil
}

// listenIn runs on a locked thread: it enters the namespace at nsPath,
// listens on addr and returns to the thread's namespace. restored is
// false only if the thread may be left in the wrong namespace.
func listenIn(ctx context.Context, nsPath, addr string) (ln net.Listener, restored bool, err error) {
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, true, err
	}
	defer orig.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		return nil, true, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("setns: %w", err)
	}
	var lc net.ListenConfig
	ln, lerr := lc.Listen(ctx, "tcp", addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, false, fmt.Errorf("setns back to the original namespace: %w", err)
	}
	return ln, true, lerr
}

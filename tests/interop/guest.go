package interop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BootOptions says which scenario to boot and how.
type BootOptions struct {
	// Scenario names guest/scenarios/NAME.sh: "linux-selftest",
	// "host-to-ours", "ours-to-linux", "auth-selftest", "auth-host" or
	// "kv-host".
	Scenario string
	// Kernel is the guest kernel (default: KernelDefault). The auth-*
	// scenarios need KernelTrixie.
	Kernel Kernel
	// Cmdline holds key=value kernel parameters the scenario reads, such as
	// nqn, target_addr, target_port, ns_size_mb (see each scenario's header).
	Cmdline map[string]string
	// HostFwd forwards 127.0.0.1:HOSTPORT on this machine to the guest's
	// TCP port, keyed by guest port. A host port of 0 picks a free one; see
	// Guest.HostPort.
	HostFwd map[int]int
	// LogPath receives the serial console. Default:
	// .cache/logs/SCENARIO-TIME-PID.log in Dir().
	LogPath string
	// Timeout stops QEMU when it elapses. Default 8 minutes (a scenario
	// takes under a minute on an idle 2-core machine, several when busy).
	Timeout time.Duration
	// MemoryMB and CPUs size the guest. Defaults 1024 and 2.
	MemoryMB int
	CPUs     int
	// Echo, if set, is called with every console line (e.g. t.Log).
	Echo func(line string)
}

// Guest is a running QEMU guest.
type Guest struct {
	opts    BootOptions
	cmd     *exec.Cmd
	started time.Time
	ports   map[int]int // guest port → host port
	logFile *os.File

	mu       sync.Mutex
	lines    []string
	notify   chan struct{} // closed and replaced whenever lines or exited change
	exited   bool
	exitErr  error
	timedOut bool
	stopped  bool
	done     chan struct{} // closed once QEMU has exited and its output is drained

	stopOnce sync.Once
	timer    *time.Timer
	ctxStop  func() bool
}

// Region is the md5 of bytes [Offset, Offset+Length) of the namespace, as the
// guest saw them.
type Region struct {
	Offset, Length int64
	MD5            string
}

// Marker is a block the guest wrote at Offset: Text repeated and cut to
// Length bytes.
type Marker struct {
	Region
	Text string
}

// Bytes returns the marker block's contents.
func (m Marker) Bytes() []byte {
	b := make([]byte, 0, m.Length+int64(len(m.Text)))
	for int64(len(b)) < m.Length && m.Text != "" {
		b = append(b, m.Text...)
	}
	return b[:m.Length]
}

// Result is what a scenario reported on the console.
type Result struct {
	Passed   bool
	Reason   string            // from INTEROP-RESULT: FAIL <reason>
	MD5      []Region          // INTEROP-MD5 lines, in order
	Markers  []Marker          // INTEROP-MARKER lines
	Values   map[string]string // INTEROP-VAL key=value lines
	Lines    []string          // every INTEROP-* line, for the record
	Duration time.Duration     // from Boot to QEMU's exit
	LogPath  string
}

// MD5Of returns the md5 the guest printed for exactly [off, off+length).
func (r Result) MD5Of(off, length int64) (string, bool) {
	for _, m := range r.MD5 {
		if m.Offset == off && m.Length == length {
			return m.MD5, true
		}
	}
	return "", false
}

// Boot starts QEMU with the scenario's kernel command line and returns once
// the guest has started its scenario (or QEMU failed to start, or the guest
// stopped before its scenario). The guest runs until it powers off, Timeout
// elapses, ctx is done, or Stop is called.
func Boot(ctx context.Context, opts BootOptions) (*Guest, error) {
	env, err := PrepareKernel(opts.Kernel)
	if err != nil {
		return nil, err
	}
	if opts.Scenario == "" {
		return nil, errors.New("interop: BootOptions.Scenario is empty")
	}
	if _, err := os.Stat(filepath.Join(Dir(), "guest", "scenarios", opts.Scenario+".sh")); err != nil {
		return nil, fmt.Errorf("interop: unknown scenario %q: %w", opts.Scenario, err)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 8 * time.Minute
	}
	if opts.MemoryMB <= 0 {
		opts.MemoryMB = 1024
	}
	if opts.CPUs <= 0 {
		opts.CPUs = 2
	}
	if opts.LogPath == "" {
		logs := filepath.Join(Dir(), ".cache", "logs")
		pruneLogs(logs, 100)
		opts.LogPath = filepath.Join(logs,
			fmt.Sprintf("%s-%s-%d.log", opts.Scenario, time.Now().Format("20060102-150405.000"), os.Getpid()))
	}
	if err := os.MkdirAll(filepath.Dir(opts.LogPath), 0o755); err != nil {
		return nil, fmt.Errorf("interop: %w", err)
	}
	appendLine, err := kernelCmdline(opts)
	if err != nil {
		return nil, err
	}

	// A picked port can be taken before QEMU binds it; retry with new ones.
	// A kernel that faults before the scenario starts (an emulation flake:
	// the same kernel and initramfs boot on the next try) is booted once
	// more; a fault once the scenario runs is the test's to judge.
	var lastErr error
	faults := 0
	for attempt := 0; attempt < 4; attempt++ {
		g, err := start(ctx, env, opts, appendLine)
		if err == nil {
			fault := g.waitStarted(ctx)
			if fault == "" || faults > 0 {
				return g, nil
			}
			faults++
			g.Stop()
			slog.Warn("interop: guest kernel faulted before its scenario started; booting again",
				"scenario", opts.Scenario, "fault", fault, "log", opts.LogPath)
			opts.LogPath = strings.TrimSuffix(opts.LogPath, ".log") + "-boot2.log"
			continue
		}
		lastErr = err
		if !errors.Is(err, errHostFwd) || !picksPorts(opts) {
			break
		}
	}
	return nil, lastErr
}

// bootFaults are console texts by which a kernel reports that it faulted.
var bootFaults = []string{panicMarker, "Oops:", "BUG: ", "general protection fault", "Internal error:"}

// startMarker is the line the guest's init prints just before it runs
// the scenario.
const startMarker = "INTEROP-START:"

// bootFault returns the first console line at which the kernel faulted
// before the scenario started, "" if the scenario started first or no
// fault is in lines, and whether the scenario has started.
func bootFault(lines []string) (fault string, started bool) {
	for _, l := range lines {
		if strings.Contains(l, startMarker) {
			return "", true
		}
		for _, f := range bootFaults {
			if strings.Contains(l, f) {
				return strings.TrimSpace(l), false
			}
		}
	}
	return "", false
}

// waitStarted waits until the guest starts its scenario, reports a result,
// exits or ctx is done, and returns the console line of a kernel fault seen
// before the scenario started ("" otherwise).
func (g *Guest) waitStarted(ctx context.Context) string {
	for {
		g.mu.Lock()
		lines, exited, ch := g.lines, g.exited, g.notify
		g.mu.Unlock()
		fault, started := bootFault(lines)
		if fault != "" || started || exited {
			return fault
		}
		for _, l := range lines {
			if strings.Contains(l, "INTEROP-RESULT:") {
				return ""
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ""
		}
	}
}

func picksPorts(opts BootOptions) bool {
	for _, hp := range opts.HostFwd {
		if hp == 0 {
			return true
		}
	}
	return false
}

// pruneLogs keeps the newest keep console logs in dir.
func pruneLogs(dir string, keep int) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var logs []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".log") {
			logs = append(logs, e.Name())
		}
	}
	if len(logs) <= keep {
		return
	}
	sort.Slice(logs, func(i, j int) bool {
		ii, _ := os.Stat(filepath.Join(dir, logs[i]))
		jj, _ := os.Stat(filepath.Join(dir, logs[j]))
		return ii != nil && jj != nil && ii.ModTime().Before(jj.ModTime())
	})
	for _, name := range logs[:len(logs)-keep] {
		os.Remove(filepath.Join(dir, name))
	}
}

var errHostFwd = errors.New("interop: QEMU could not set up host forwarding")

func kernelCmdline(opts BootOptions) (string, error) {
	parts := []string{"console=ttyS0", "panic=-1", "scenario=" + opts.Scenario}
	for _, k := range slices.Sorted(maps.Keys(opts.Cmdline)) {
		v := opts.Cmdline[k]
		if k == "" || strings.ContainsAny(k+v, " \t\n\"'") || strings.Contains(k, "=") {
			return "", fmt.Errorf("interop: bad kernel parameter %q=%q", k, v)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, " "), nil
}

func start(ctx context.Context, env Env, opts BootOptions, appendLine string) (*Guest, error) {
	ports := make(map[int]int, len(opts.HostFwd))
	netdev := "user,id=n0"
	for _, gp := range slices.Sorted(maps.Keys(opts.HostFwd)) {
		hp := opts.HostFwd[gp]
		if hp == 0 {
			p, err := FreePort()
			if err != nil {
				return nil, fmt.Errorf("interop: %w", err)
			}
			hp = p
		}
		ports[gp] = hp
		netdev += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-:%d", hp, gp)
	}

	args := []string{}
	// KVM only on request: on this project's machines /dev/kvm can exist and
	// open but not work (QEMU aborts with "failed to set MSR").
	if os.Getenv("NEARSTORE_INTEROP_KVM") == "1" {
		args = append(args, "-accel", "kvm") // falls back to the next -accel
	}
	args = append(args,
		"-accel", "tcg",
		"-cpu", "max",
		"-m", strconv.Itoa(opts.MemoryMB),
		"-smp", strconv.Itoa(opts.CPUs),
		"-nographic", "-monitor", "none", "-no-reboot",
		"-kernel", env.Kernel,
		"-initrd", env.Initrd,
		"-append", appendLine,
		"-netdev", netdev,
		"-device", "virtio-net-pci,netdev=n0",
	)

	logFile, err := os.Create(opts.LogPath)
	if err != nil {
		return nil, fmt.Errorf("interop: %w", err)
	}
	fmt.Fprintf(logFile, "# %s %s\n", env.QEMU, strings.Join(args, " "))
	pr, pw, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("interop: %w", err)
	}
	cmd := exec.Command(env.QEMU, args...)
	// A test process killed (go test's -timeout, ^C) must not leave its
	// guest running: ours-to-linux waits up to an hour for a stop command.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdin = nil
	cmd.Stdout = pw
	cmd.Stderr = pw
	g := &Guest{
		opts:    opts,
		cmd:     cmd,
		started: time.Now(),
		ports:   ports,
		logFile: logFile,
		notify:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		logFile.Close()
		return nil, fmt.Errorf("interop: starting QEMU: %w", err)
	}
	pw.Close()
	g.timer = time.AfterFunc(opts.Timeout, func() {
		g.mu.Lock()
		g.timedOut = true
		g.mu.Unlock()
		g.kill()
	})
	g.ctxStop = context.AfterFunc(ctx, g.kill)
	go g.readConsole(pr)

	// Wait for the first line from the guest, so QEMU start-up errors (e.g.
	// a host port in use), which QEMU prints with its name in front, are
	// reported by Boot.
	qemuPrefix := filepath.Base(env.QEMU) + ":"
	first := time.NewTimer(30 * time.Second)
	defer first.Stop()
	for {
		g.mu.Lock()
		exited, ch := g.exited, g.notify
		guestSpoke := false
		for _, l := range g.lines[min(1, len(g.lines)):] { // [0] is our header
			if !strings.HasPrefix(l, qemuPrefix) {
				guestSpoke = true
				break
			}
		}
		g.mu.Unlock()
		if exited {
			<-g.done
			out := g.Tail(20)
			if strings.Contains(out, "hostfwd") || strings.Contains(out, "host forwarding") {
				return nil, fmt.Errorf("%w:\n%s", errHostFwd, out)
			}
			return nil, fmt.Errorf("interop: QEMU exited at start (%v):\n%s", g.exitErr, out)
		}
		if guestSpoke {
			return g, nil
		}
		select {
		case <-ch:
		case <-first.C:
			return g, nil // silent so far; let WaitFor/Wait judge
		}
	}
}

func (g *Guest) readConsole(r *os.File) {
	defer r.Close()
	g.mu.Lock()
	g.lines = append(g.lines, "# console of "+g.opts.Scenario)
	g.mu.Unlock()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		s, err := br.ReadString('\n')
		if s != "" {
			g.logFile.WriteString(s)
			line := strings.TrimRight(s, "\r\n")
			if g.opts.Echo != nil {
				g.opts.Echo(line)
			}
			g.mu.Lock()
			g.lines = append(g.lines, line)
			close(g.notify)
			g.notify = make(chan struct{})
			g.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	werr := g.cmd.Wait()
	g.timer.Stop()
	g.ctxStop()
	g.mu.Lock()
	g.exited = true
	g.exitErr = werr
	fmt.Fprintf(g.logFile, "# QEMU exited after %v: %v\n", time.Since(g.started).Round(time.Millisecond), werr)
	g.logFile.Close()
	close(g.notify)
	g.notify = make(chan struct{})
	g.mu.Unlock()
	close(g.done)
}

// kill asks QEMU to quit (SIGTERM), then makes sure (SIGKILL after 5 s).
func (g *Guest) kill() {
	g.mu.Lock()
	exited := g.exited
	g.mu.Unlock()
	if exited || g.cmd.Process == nil {
		return
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(5 * time.Second):
		_ = g.cmd.Process.Kill()
	}
}

// Stop stops QEMU if it still runs and waits for it. It may be called more
// than once, and after the guest powered off by itself.
func (g *Guest) Stop() error {
	g.stopOnce.Do(func() {
		g.mu.Lock()
		if !g.exited {
			g.stopped = true
		}
		g.mu.Unlock()
		g.kill()
	})
	<-g.done
	return nil
}

// HostPort returns the port on 127.0.0.1 forwarded to guestPort, or 0.
func (g *Guest) HostPort(guestPort int) int { return g.ports[guestPort] }

// HostAddr returns "127.0.0.1:PORT" forwarded to guestPort, or "" if none.
func (g *Guest) HostAddr(guestPort int) string {
	p := g.ports[guestPort]
	if p == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// LogPath is the file the console is written to.
func (g *Guest) LogPath() string { return g.opts.LogPath }

// Tail returns the last n console lines.
func (g *Guest) Tail(n int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.lines
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// Exited is closed once QEMU has exited.
func (g *Guest) Exited() <-chan struct{} { return g.done }

const (
	failMarker  = "INTEROP-RESULT: FAIL"
	passMarker  = "INTEROP-RESULT: PASS"
	panicMarker = "Kernel panic - not syncing"
)

// WaitFor waits until a console line contains marker (looking at the whole
// console so far, so a marker printed before the call counts) and returns
// that line. It fails early if the scenario fails, the kernel panics or QEMU
// exits first.
func (g *Guest) WaitFor(ctx context.Context, marker string) (string, error) {
	i := 0
	for {
		g.mu.Lock()
		lines, exited, ch := g.lines, g.exited, g.notify
		g.mu.Unlock()
		for ; i < len(lines); i++ {
			l := lines[i]
			if strings.Contains(l, marker) {
				return l, nil
			}
			if strings.Contains(l, failMarker) || strings.Contains(l, panicMarker) {
				return "", fmt.Errorf("interop: %s while waiting for %q: %s\n%s",
					g.opts.Scenario, marker, strings.TrimSpace(l), g.Tail(40))
			}
		}
		if exited {
			return "", fmt.Errorf("interop: %s: QEMU exited (%v%s) before %q\n%s",
				g.opts.Scenario, g.exitErr, g.why(), marker, g.Tail(40))
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return "", fmt.Errorf("interop: waiting for %q: %w", marker, ctx.Err())
		}
	}
}

func (g *Guest) why() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.timedOut:
		return fmt.Sprintf("; timed out after %v", g.opts.Timeout)
	case g.stopped:
		return "; stopped"
	}
	return ""
}

// Run boots a guest with opts, waits for its scenario, stops it and
// returns what it reported, failing t (with the console's tail) unless
// the scenario passed; it logs the time taken under name ("guest",
// "host guest").
func Run(ctx context.Context, t testing.TB, name string, opts BootOptions) Result {
	t.Helper()
	g, err := Boot(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	res, err := g.Wait(ctx)
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, g.Tail(80))
	}
	t.Logf("%s passed in %v (log %s)", name, res.Duration.Round(time.Second), res.LogPath)
	return res
}

// Wait waits for QEMU to exit and parses the scenario's report. The error is
// nil exactly when the scenario printed INTEROP-RESULT: PASS; on FAIL the
// Result is still filled in.
func (g *Guest) Wait(ctx context.Context) (Result, error) {
	select {
	case <-g.done:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("interop: waiting for %s: %w", g.opts.Scenario, ctx.Err())
	}
	g.mu.Lock()
	lines := g.lines
	g.mu.Unlock()
	res := parseResult(lines)
	res.Duration = time.Since(g.started)
	res.LogPath = g.opts.LogPath
	switch {
	case res.Passed:
		return res, nil
	case res.Reason != "":
		return res, fmt.Errorf("interop: scenario %s failed: %s (log %s)\n%s",
			g.opts.Scenario, res.Reason, g.opts.LogPath, g.Tail(60))
	default:
		return res, fmt.Errorf("%w (%s: QEMU %v%s; log %s)\n%s",
			errNoResult, g.opts.Scenario, g.exitErr, g.why(), g.opts.LogPath, g.Tail(60))
	}
}

var md5Re = regexp.MustCompile(`^[0-9a-f]{32}$`)

// parseResult reads the INTEROP-* lines of a console log. Kernel messages
// may precede a marker on its line, so markers are found anywhere in a line.
func parseResult(lines []string) Result {
	res := Result{Values: map[string]string{}}
	for _, l := range lines {
		i := strings.Index(l, "INTEROP-")
		if i < 0 {
			continue
		}
		l = strings.TrimSpace(l[i:])
		res.Lines = append(res.Lines, l)
		f := strings.Fields(l)
		switch {
		case strings.HasPrefix(l, passMarker):
			if res.Reason == "" {
				res.Passed = true
			}
		case strings.HasPrefix(l, failMarker):
			res.Passed = false
			res.Reason = strings.TrimSpace(strings.TrimPrefix(l, failMarker))
			if res.Reason == "" {
				res.Reason = "unknown"
			}
		case f[0] == "INTEROP-MD5" && len(f) >= 4:
			if r, ok := parseRegion(f[1:4]); ok {
				res.MD5 = append(res.MD5, r)
			}
		case f[0] == "INTEROP-MARKER" && len(f) >= 5:
			if r, ok := parseRegion(f[1:4]); ok {
				res.Markers = append(res.Markers, Marker{Region: r, Text: f[4]})
			}
		case f[0] == "INTEROP-VAL" && len(f) >= 2:
			if k, v, ok := strings.Cut(f[1], "="); ok {
				res.Values[k] = v
			}
		}
	}
	return res
}

func parseRegion(f []string) (Region, bool) {
	off, err1 := strconv.ParseInt(f[0], 10, 64)
	n, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || !md5Re.MatchString(f[2]) {
		return Region{}, false
	}
	return Region{Offset: off, Length: n, MD5: f[2]}, true
}

// Control sends one command to the ours-to-linux scenario's control port
// (guest port GuestControlPort, which must be in BootOptions.HostFwd) and
// returns the reply after "OK ". Commands: "ping", "md5 OFFSET LEN" (md5 of
// the nvmet backing file's bytes) and "stop" (the guest reports PASS and
// powers off; follow with Wait).
func (g *Guest) Control(ctx context.Context, command string) (string, error) {
	addr := g.HostAddr(GuestControlPort)
	if addr == "" {
		return "", fmt.Errorf("interop: guest port %d is not forwarded", GuestControlPort)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("interop: control: %w", err)
	}
	defer conn.Close()
	deadline := time.Now().Add(time.Minute)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	conn.SetDeadline(deadline)
	if _, err := io.WriteString(conn, command+"\n"); err != nil {
		return "", fmt.Errorf("interop: control %q: %w", command, err)
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	reply = strings.TrimSpace(reply)
	if reply == "" && err != nil {
		// QEMU's user-net accepts the connection even when nothing listens
		// in the guest, then closes it.
		return "", fmt.Errorf("interop: control %q: no reply (is the guest's control port up?): %w", command, err)
	}
	if r, ok := strings.CutPrefix(reply, "OK"); ok {
		return strings.TrimSpace(r), nil
	}
	return "", fmt.Errorf("interop: control %q: %s", command, reply)
}

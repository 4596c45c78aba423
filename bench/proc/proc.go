// Package proc starts and controls the child processes a benchmark runs:
// servers it drives (a nearstore target, nbdkit) and load generators (fio),
// each in its own process group, optionally pinned to CPUs or inside a
// network namespace, and never outliving the benchmark.
package proc

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Spec describes a child process a benchmark starts: a server it
// drives, or a load generator.
type Spec struct {
	// Name labels the process in errors ("nbdkit", "fio", "nearstore target").
	Name string
	// Path is the program and Args its arguments (without argv[0]).
	Path string
	Args []string
	// CPUs, when set, runs the program under taskset(1) with this CPU list
	// ("1", "0-1", "0,2").
	CPUs string
	// Netns, when set, runs the program (under taskset, if CPUs is set)
	// inside this network namespace with "ip netns exec", as a target
	// behind a shaped Link (Link.Netns). ip execs the program, so Pid is
	// still the program's.
	Netns string
	// Stdout receives the program's standard output (default: discarded).
	Stdout io.Writer
	// Stderr, if set, receives the program's standard error too (Process
	// keeps its end for errors either way).
	Stderr io.Writer
}

// Process is a child process running in its own process group. The group
// is killed when the context given to Start ends, when Stop is
// called and, on Linux, when this process dies (parent-death signal).
type Process struct {
	name   string
	cmd    *exec.Cmd
	stderr *tailBuffer
	done   chan struct{}
	err    error // from Wait; read only after done is closed
}

// processWaitDelay bounds how long Wait waits for the process's output
// pipes after it was killed, and Stop for the process after SIGTERM.
const processWaitDelay = 5 * time.Second

// Start starts spec's program. The caller must Stop it (or end ctx)
// and may Wait for it.
func Start(ctx context.Context, spec Spec) (*Process, error) {
	path, args := spec.Path, spec.Args
	name := spec.Name
	if name == "" {
		name = filepath.Base(spec.Path)
	}
	if spec.CPUs != "" {
		ts, err := exec.LookPath("taskset")
		if err != nil {
			return nil, fmt.Errorf("bench: pinning %s to CPUs %s: %w", spec.Name, spec.CPUs, err)
		}
		args = append([]string{"-c", spec.CPUs, path}, args...)
		path = ts
	}
	if spec.Netns != "" {
		ip, err := lookIP()
		if err != nil {
			return nil, fmt.Errorf("bench: running %s in netns %s: %w", name, spec.Netns, err)
		}
		args = append([]string{"netns", "exec", spec.Netns, path}, args...)
		path = ip
	}
	p := &Process{name: name, stderr: &tailBuffer{max: 8 << 10}, done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = childAttr()
	cmd.Stdout = spec.Stdout
	cmd.Stderr = p.stderr
	if spec.Stderr != nil {
		cmd.Stderr = io.MultiWriter(p.stderr, spec.Stderr)
	}
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.WaitDelay = processWaitDelay
	p.cmd = cmd
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: starting %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		// Whatever the leader did, leave none of its group behind
		// (fio forks a process per job).
		_ = killGroup(cmd.Process)
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process ID (that of the program itself: ip netns exec
// and taskset exec it).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// StderrTail returns the end of what the process has written to its
// standard error so far (at most 8 KiB).
func (p *Process) StderrTail() string { return strings.TrimSpace(p.stderr.String()) }

// Wait waits for the process to exit and returns its failure, with the end
// of its standard error, if it did not exit 0.
func (p *Process) Wait() error {
	<-p.done
	if p.err != nil {
		return p.exitError()
	}
	return nil
}

func (p *Process) exitError() error {
	msg := strings.TrimSpace(p.stderr.String())
	if msg == "" {
		return fmt.Errorf("bench: %s: %w", p.name, p.err)
	}
	return fmt.Errorf("bench: %s: %w: %s", p.name, p.err, msg)
}

// Stop asks the process group to terminate (SIGTERM), kills it if it is
// still there after a few seconds, and waits for it. It returns nil when the
// process exited because of Stop, and its error if it had already failed.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return p.Wait()
	default:
	}
	_ = signalGroup(p.cmd.Process, sigTerm)
	select {
	case <-p.done:
	case <-time.After(processWaitDelay):
		_ = killGroup(p.cmd.Process)
		<-p.done
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it; safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// InterruptAll sends os.Interrupt to every started command in cmds, then
// waits for each to exit, ignoring how: all are asked first so their
// graceful shutdowns overlap. It is for children that stop cleanly on
// Ctrl-C (nearstore's cluster nodes), started with os/exec directly.
func InterruptAll(cmds []*exec.Cmd) {
	for _, c := range cmds {
		c.Process.Signal(os.Interrupt)
	}
	for _, c := range cmds {
		c.Wait()
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// WaitListening waits until something accepts TCP connections on addr,
// failing if p exits first, ctx ends or timeout passes.
func WaitListening(ctx context.Context, addr string, p *Process, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		d := net.Dialer{Timeout: 250 * time.Millisecond}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		select {
		case <-p.Done():
			if err := p.Wait(); err != nil {
				return fmt.Errorf("bench: %s exited before listening on %s: %w", p.name, addr, err)
			}
			return fmt.Errorf("bench: %s exited before listening on %s", p.name, addr)
		case <-ctx.Done():
			return fmt.Errorf("bench: waiting for %s to listen on %s: %w", p.name, addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// LookSbin finds an administration tool on $PATH or in the sbin
// directories, which a non-login root shell may not have on $PATH.
func LookSbin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found (iproute2 is not installed)", name)
}

// lookIP finds ip(8), which Spec.Netns runs programs with.
func lookIP() (string, error) { return LookSbin("ip") }

// Package testproc runs a child process in a test and reads what it
// prints, a line at a time: a re-executed test binary in a role, or the
// nearstore binary (internal/clitest builds it). Tests about processes
// (kills, restarts, crashes) start their processes through it, so each
// child is reaped and none outlives its test.
package testproc

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Proc is a running child process.
type Proc struct {
	Cmd *exec.Cmd
	// Lines has what the process prints to stdout, a line at a time; it
	// is closed when stdout ends. Nothing else may read stdout.
	Lines <-chan string

	kill   sync.Once
	killed chan struct{} // closed by Kill: what Lines has no room for is dropped from then
	done   chan struct{} // closed once stdout ended and the process was reaped
}

// Start starts cmd with its stderr going to the test's and its stdout
// read into Lines. The process is killed, if still running, and reaped
// when the test ends.
func Start(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	p := &Proc{Cmd: cmd, Lines: lines, killed: make(chan struct{}), done: make(chan struct{})}
	go func() {
		// Read stdout to its end before Wait, which closes it.
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			// Lines printed before a kill are kept while Lines has
			// room; only a full Lines after Kill drops them.
			select {
			case lines <- sc.Text():
				continue
			default:
			}
			select {
			case lines <- sc.Text():
			case <-p.killed:
			}
		}
		close(lines)
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.Kill)
	return p
}

// Expect waits for a line starting with prefix and returns the rest of
// it, trimmed; the test fails if stdout ends first.
func (p *Proc) Expect(t testing.TB, prefix string) string {
	t.Helper()
	for line := range p.Lines {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatalf("%s ended without printing %q", p.Cmd.Path, prefix)
	return ""
}

// Kill kills the process (SIGKILL: no cleanup runs in it) and waits for
// it to exit. Killing an exited process does nothing.
func (p *Proc) Kill() {
	p.kill.Do(func() {
		close(p.killed)
		p.Cmd.Process.Kill()
	})
	<-p.done
}

// Done is closed when the process has exited and its stdout has ended:
// a process whose own children inherit its stdout is done when they have
// exited too (give them a pipe of their own, or Pdeathsig).
func (p *Proc) Done() <-chan struct{} { return p.done }

package lambdabench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/bench/proc"
)

// TestTargetFailure: a failed run whose target process ended says how it
// ended (its status and the end of its standard error); one whose target
// is still running, or that did not fail, is left as it was.
func TestTargetFailure(t *testing.T) {
	ctx := context.Background()
	runErr := errors.New("connection to controller lost: EOF")
	for _, tc := range []struct {
		name   string
		script string
		err    error
		want   []string // substrings of the result (nil: the error unchanged)
	}{
		{"crashed", "echo 'panic: boom' >&2; exit 2", runErr, []string{runErr.Error(), "exit status 2", "panic: boom"}},
		{"exited cleanly", "exit 0", runErr, []string{runErr.Error(), "status 0"}},
		{"still running", "sleep 30", runErr, nil},
		{"still running, logged", "echo 'WARN queue failed' >&2; sleep 30", runErr, []string{runErr.Error(), "still running", "WARN queue failed"}},
		{"no failure", "exit 1", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := proc.Start(ctx, proc.Spec{Name: "target", Path: "/bin/sh", Args: []string{"-c", tc.script}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Stop()
			if tc.want != nil && !strings.Contains(tc.script, "sleep") {
				<-p.Done()
			}
			if strings.Contains(tc.script, "echo") {
				waitLogged(t, p)
			}
			e := &lambdaEnv{target: p}
			got := e.targetFailure(tc.err)
			if tc.want == nil {
				if got != tc.err {
					t.Fatalf("got %v, want %v unchanged", got, tc.err)
				}
				return
			}
			if !errors.Is(got, runErr) {
				t.Errorf("%v does not wrap the run's error", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
		})
	}
}

// waitLogged waits until p has written to its standard error.
func waitLogged(t *testing.T, p *proc.Process) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.StderrTail() == "" {
		if time.Now().After(deadline) {
			t.Fatal("the process logged nothing")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

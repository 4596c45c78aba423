package proc

import (
	"context"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestProcessStopAndCancel(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1)")
	}
	p, err := Start(context.Background(), Spec{Path: sleep, Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("Stop took %v", time.Since(start))
	}

	ctx, cancel := context.WithCancel(context.Background())
	p, err = Start(ctx, Spec{Path: sleep, Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the context did not kill the process")
	}
	if err := p.Wait(); err == nil {
		t.Error("a killed process waited without error")
	}
}

func TestWaitListening(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// A process that exits at once is reported with its stderr.
	p, err := Start(context.Background(), Spec{Name: "quitter", Path: sh, Args: []string{"-c", "echo boom >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	err = WaitListening(context.Background(), net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), p, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("WaitListening on a dead process: %v", err)
	}

	// Something listening is found.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err = Start(context.Background(), Spec{Path: sh, Args: []string{"-c", "sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if err := WaitListening(context.Background(), ln.Addr().String(), p, 5*time.Second); err != nil {
		t.Errorf("WaitListening: %v", err)
	}
}

func TestParseCPUList(t *testing.T) {
	got, err := parseCPUList("0,2-4")
	if err != nil || !slices.Equal(got, []int{0, 2, 3, 4}) {
		t.Errorf("parseCPUList: %v %v", got, err)
	}
	for _, bad := range []string{"", "x", "3-1", "-1"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 4}
	_, _ = b.Write([]byte("abc"))
	_, _ = b.Write([]byte("defg"))
	if got := b.String(); got != "defg" {
		t.Errorf("tail %q, want defg", got)
	}
}

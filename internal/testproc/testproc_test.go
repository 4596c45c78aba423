package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

const childEnv = "TESTPROC_CHILD"

// TestMain makes the test binary a child that prints its lines when
// TESTPROC_CHILD is set: "exit" prints three lines and exits, "hang"
// prints more than Lines holds and then blocks until killed.
func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "exit":
		fmt.Println("one")
		fmt.Println("port 4420")
		fmt.Println("three")
		os.Exit(0)
	case "hang":
		for i := range 5000 {
			fmt.Println("line", i)
		}
		fmt.Println("ready")
		select {}
	}
	os.Exit(m.Run())
}

func child(mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	return cmd
}

// TestExpectThenExit: Expect skips to its line and returns the rest of
// it; the lines after it are still delivered, then Lines closes and Done
// closes after the process exits by itself.
func TestExpectThenExit(t *testing.T) {
	p := Start(t, child("exit"))
	if got := p.Expect(t, "port "); got != "4420" {
		t.Fatalf("Expect = %q, want 4420", got)
	}
	if line := <-p.Lines; line != "three" {
		t.Fatalf("next line %q, want three", line)
	}
	if _, ok := <-p.Lines; ok {
		t.Fatal("Lines not closed after the child exited")
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done not closed after the child exited")
	}
	if !p.Cmd.ProcessState.Success() {
		t.Fatalf("child exited %v", p.Cmd.ProcessState)
	}
}

// TestKillUnread: a child that printed more than Lines holds, nobody
// reading, is killed and reaped by Kill without blocking; a second Kill
// returns at once.
func TestKillUnread(t *testing.T) {
	p := Start(t, child("hang"))
	if got := p.Expect(t, "line 0"); got != "" {
		t.Fatalf("Expect = %q", got)
	}
	p.Kill()
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Kill")
	}
	if p.Cmd.ProcessState.Success() {
		t.Fatal("a killed child reported success")
	}
	p.Kill()
}

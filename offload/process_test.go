package offload_test

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/internal/testproc"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offloadfs"
)

// The crash tests run the side that dies as a real process: this test
// binary started again in a role (OFFLOAD_TEST_ROLE), killed with
// SIGKILL in the middle of a task.
func TestMain(m *testing.M) {
	switch os.Getenv("OFFLOAD_TEST_ROLE") {
	case "":
		os.Exit(m.Run())
	case "engine":
		err := engineMain()
		fmt.Fprintln(os.Stderr, "engine:", err)
		os.Exit(1)
	case "owner":
		err := ownerMain()
		fmt.Fprintln(os.Stderr, "owner:", err)
		os.Exit(1)
	}
	os.Exit(2)
}

// hangTask fills its output, calls started, and waits for its context to
// end.
func hangTask(started func()) offload.Task {
	return func(ctx context.Context, env *offload.Env, _ []byte) ([]byte, error) {
		buf := make([]byte, env.Size(1))
		for i := range buf {
			buf[i] = 0xab
		}
		if _, err := env.WriteAt(ctx, 1, buf, 0); err != nil {
			return nil, err
		}
		started()
		<-ctx.Done()
		// Its run is over: nothing more lands.
		if _, err := env.WriteAt(context.Background(), 1, buf[:1], 0); !errors.Is(err, offload.ErrTaskEnded) {
			return nil, fmt.Errorf("a write after the run ended: %v", err)
		}
		return nil, ctx.Err()
	}
}

// childNamespace connects a child process to the rig's target at
// OFFLOAD_TEST_TARGET as hostNQN and returns namespace 1.
func childNamespace(ctx context.Context, hostNQN string) (*host.Namespace, error) {
	ctrl, err := host.Connect(ctx, os.Getenv("OFFLOAD_TEST_TARGET"), rigNQN, host.Options{HostNQN: hostNQN, IOQueues: 2, KeepAlive: -1})
	if err != nil {
		return nil, err
	}
	return ctrl.Namespace(1)
}

// engineMain is a peer engine: it prints "listening ADDR", and "started"
// when its hang task has written its output.
func engineMain() error {
	ctx := context.Background()
	ns, err := childNamespace(ctx, engineNQN)
	if err != nil {
		return err
	}
	if err := offload.RegisterTaskHost(ctx, ns, engineNQN); err != nil {
		return err
	}
	tasks := offload.StandardTasks()
	if err := tasks.Register("hang", hangTask(func() { fmt.Println("started") })); err != nil {
		return err
	}
	e, err := offload.NewEngine(offload.Config{HostNQN: engineNQN, Device: ns, Tasks: tasks,
		BeforeTask: func(ctx context.Context) error { return offload.RegisterTaskHost(ctx, ns, engineNQN) }})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println("listening", ln.Addr())
	return offload.NewServer(e).Serve(ln)
}

// ownerMain mounts the file system as its owner and offloads hang over
// "a" to the engine at OFFLOAD_TEST_ENGINE, to be killed meanwhile.
func ownerMain() error {
	ctx := context.Background()
	ns, err := childNamespace(ctx, ownerNQN)
	if err != nil {
		return err
	}
	fsys, err := offloadfs.Mount(ctx, ns, offloadfs.Options{CommitInterval: -1, Remote: ns})
	if err != nil {
		return err
	}
	a, err := fsys.Open("a")
	if err != nil {
		return err
	}
	c, err := offload.Dial(os.Getenv("OFFLOAD_TEST_ENGINE"), offload.ClientOptions{})
	if err != nil {
		return err
	}
	_, err = fsys.Offload(ctx, c, "hang", []offloadfs.OffloadFile{{In: a}, {Out: "out", Reserve: 256 << 10}}, nil)
	return fmt.Errorf("the task ended: %v", err)
}

// startChild re-executes the test binary as role, with env added.
func startChild(t *testing.T, role string, env ...string) *testproc.Proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"OFFLOAD_TEST_ROLE=" + role}, env...)...)
	return testproc.Start(t, cmd)
}

// freeAfterWarmCopy copies in through c to a file reserving reserve
// bytes and removes that file, so that the orphan directory already
// holds the block its first entry takes, and returns the blocks free
// after: what a task that dies mid-way must leave free.
func (r *rig) freeAfterWarmCopy(ctx context.Context, c *offload.Client, in string, reserve int64) uint64 {
	r.t.Helper()
	if _, err := r.fsys.Offload(ctx, c, "copy", []offloadfs.OffloadFile{{In: r.open(in)}, {Out: "warm", Reserve: reserve}}, nil); err != nil {
		r.t.Fatal(err)
	}
	if err := r.fsys.Remove("warm"); err != nil {
		r.t.Fatal(err)
	}
	if err := r.fsys.Sync(ctx); err != nil {
		r.t.Fatal(err)
	}
	free, _ := r.fsys.FreeBlocks()
	return free
}

// afterCrash checks what must hold once either side died mid-task and
// the owner's file system is mounted again: consistent, no orphan left,
// no block lost, committed files intact, no output.
func afterCrash(t *testing.T, fsys *offloadfs.FS, r *rig, want map[string][]byte, freeBefore uint64) {
	t.Helper()
	rep := testfs.Fsck(t, fsys)
	if rep.Orphans != 0 {
		t.Fatalf("%d orphans after the mount", rep.Orphans)
	}
	for name, data := range want {
		mustEqual(t, name, r.contents(fsys, name), data)
	}
	if _, err := fsys.Stat("out"); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("the output of the interrupted task is visible: %v", err)
	}
	if free, _ := fsys.FreeBlocks(); free != freeBefore {
		t.Fatalf("%d blocks free, %d before the task", free, freeBefore)
	}
}

// TestEngineDiesMidTask: the engine process is killed after writing its
// output and before the owner's commit. The owner's call fails, and the
// output's space comes back; a mount after that agrees.
func TestEngineDiesMidTask(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	want := map[string][]byte{"a": r.write("a", 100_000, 1), "b": r.write("b", 5000, 2)}
	eng := startChild(t, "engine", "OFFLOAD_TEST_TARGET="+r.target.Addr())
	addr := eng.Expect(t, "listening ")
	c, err := offload.Dial(addr, offload.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	freeBefore := r.freeAfterWarmCopy(ctx, c, "b", 8192)

	done := make(chan error, 1)
	go func() {
		_, err := r.fsys.Offload(ctx, c, "hang", []offloadfs.OffloadFile{{In: r.open("a")}, {Out: "out", Reserve: 256 << 10}}, nil)
		done <- err
	}()
	eng.Expect(t, "started")
	eng.Kill()
	if err := <-done; err == nil {
		t.Fatal("the task succeeded on a killed engine")
	}
	if err := r.fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	afterCrash(t, r.fsys, r, want, freeBefore)
	if err := r.fsys.Close(); err != nil {
		t.Fatal(err)
	}
	afterCrash(t, r.mount(), r, want, freeBefore)
}

// TestClientDiesMidTask: the owner process is killed while the engine
// runs its task, after the output's space was reserved, granted and
// written. The engine's task ends (its client is gone) and writes
// nothing more; the next mount frees the output (an orphan) and ends the
// dead owner's grants.
func TestClientDiesMidTask(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	want := map[string][]byte{"a": r.write("a", 100_000, 1)}
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	tasks := offload.StandardTasks()
	hang := hangTask(func() { started <- struct{}{} })
	if err := tasks.Register("hang", func(ctx context.Context, env *offload.Env, args []byte) ([]byte, error) {
		out, err := hang(ctx, env, args)
		ended <- err
		return out, err
	}); err != nil {
		t.Fatal(err)
	}
	_, c := r.engine(onPeer, offload.Config{Tasks: tasks})
	freeBefore := r.freeAfterWarmCopy(ctx, c, "a", 1<<20)
	// The owner is the child from here.
	if err := r.fsys.Close(); err != nil {
		t.Fatal(err)
	}
	owner := startChild(t, "owner", "OFFLOAD_TEST_TARGET="+r.target.Addr(), "OFFLOAD_TEST_ENGINE="+c.Addr())
	select {
	case <-started:
	case line, ok := <-owner.Lines:
		t.Fatalf("the owner printed %q (ended %v) before the task started", line, !ok)
	}
	owner.Kill()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the task ended with %v, want its context canceled", err)
	}
	// The dead owner's host mounts again (as after a reboot).
	afterCrash(t, r.mount(), r, want, freeBefore)
}

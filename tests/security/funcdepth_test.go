package security_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
)

// TestRunawayRecursion: issue 18's "48 runaway recursions took 3.5 GB,
// kept afterwards". wazero grew each call's stack up to about 84 MB and
// kept it in the pooled instance; the call stack is now bounded
// (--func-stack) and counted with --func-memory. Against a real target
// process: a recursion within the bound works; 48 runaway ones, in
// flight at once, each fail with Function Memory; the target's RSS stays
// within a few tens of MB of what it was; another host's I/O works
// throughout; and the same function still works afterwards.
func TestRunawayRecursion(t *testing.T) {
	addr, metrics := serve(t, "--func-stack", "1048576")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	module, err := os.ReadFile(filepath.Join("testdata", "depth.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	connect := func(nqn string) (*host.Controller, *host.Namespace) {
		return testhost.Connect(t, addr, subNQN, 1, host.Options{HostNQN: nqn, QueueDepth: 64})
	}
	ctrl, hostile := connect("nqn.2014-08.org.nvmexpress:uuid:recursing")
	_, polite := connect("nqn.2014-08.org.nvmexpress:uuid:polite")
	fn, err := ctrl.LoadFunction(ctx, module)
	if err != nil {
		t.Fatal(err)
	}
	files := []pushdown.File{hostile.RawFile()}
	recurse := func(depth uint32) error {
		_, err := hostile.LambdaRead(ctx, fn, files, host.Start{Length: 4096}, binary.LittleEndian.AppendUint32(nil, depth), 16)
		return err
	}
	if err := recurse(1000); err != nil {
		t.Fatalf("a recursion 1000 deep: %v", err)
	}
	rss0 := metric(t, metrics, "process_resident_memory_bytes")

	// The polite host writes and reads back while the recursions run.
	stop := make(chan struct{})
	politeDone := make(chan error, 1)
	go func() {
		want := []byte(strings.Repeat("polite host ", 342))[:4096]
		got := make([]byte, 4096)
		for i := 0; ; i++ {
			select {
			case <-stop:
				if i == 0 {
					politeDone <- errors.New("no I/O done")
					return
				}
				politeDone <- nil
				return
			default:
			}
			if _, err := polite.WriteAt(want, 1<<20); err != nil {
				politeDone <- err
				return
			}
			if _, err := polite.ReadAt(got, 1<<20); err != nil || string(got) != string(want) {
				politeDone <- errors.Join(errors.New("read back differs"), err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 48)
	for range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- recurse(0xFFFFFFFF)
		}()
	}
	wg.Wait()
	close(stop)
	close(errs)
	for err := range errs {
		var st *nvme.StatusError
		if !errors.As(err, &st) || st.Status.Code() != nvme.StatusFunctionMemory {
			t.Fatalf("a runaway recursion: %v, want Function Memory", err)
		}
	}
	if err := <-politeDone; err != nil {
		t.Fatalf("the polite host's I/O during the recursions: %v", err)
	}
	rss1 := metric(t, metrics, "process_resident_memory_bytes")
	t.Logf("target RSS %.0f MiB before the runaway recursions, %.0f MiB after", rss0/(1<<20), rss1/(1<<20))
	if rss1-rss0 > 64<<20 {
		t.Fatalf("48 runaway recursions grew the target's RSS by %.0f MiB", (rss1-rss0)/(1<<20))
	}
	if err := recurse(1000); err != nil {
		t.Fatalf("a recursion 1000 deep after the runaways: %v", err)
	}
}

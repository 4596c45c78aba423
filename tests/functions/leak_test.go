package functions_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testmodules"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
)

// TestNoLeakToTaskHost: issue 18's leak, end to end. The owner runs a
// function over 8 KiB of its blocks; a task host then runs the same
// function on the one block it was granted. A pooled wasm instance used to
// keep the owner's input, and this function hands it out: 7.5 KiB of the
// owner's data reached the task host. Now no byte beyond its own block
// comes back.
func TestNoLeakToTaskHost(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	const n = 8 << 10
	secret := bytes.Repeat([]byte("the owner's secret "), n/19+1)[:n]
	if _, err := e.ns.WriteAt(secret, 1000*bs); err != nil {
		t.Fatal(err)
	}
	mine := bytes.Repeat([]byte{0x7a}, bs)
	if _, err := e.ns.WriteAt(mine, 3000*bs); err != nil {
		t.Fatal(err)
	}
	fn := e.loadBytes(testmodules.Reveal())
	ownerFile := pushdown.File{Size: n, Extents: []pushdown.Extent{{LBA: 1000, Blocks: n / bs}}}
	if _, err := e.ns.LambdaRead(ctx, fn, []pushdown.File{ownerFile}, host.Start{Length: n}, nil, 16); err != nil {
		t.Fatal(err)
	}

	const taskNQN = "nqn.2026-11.io.nearstore:leak-task"
	_, task := e.connectAs(taskNQN, 1)
	if err := e.ns.Register(ctx, host.RegisterOpts{Action: host.RegisterKey, NewKey: 0x51}); err != nil {
		t.Fatal(err)
	}
	if err := e.ns.Acquire(ctx, host.AcquireOpts{Action: host.AcquireReservation, Type: nvme.ResvWriteExclusiveRegOnly, Key: 0x51}); err != nil {
		t.Fatal(err)
	}
	if err := e.ns.Grant(ctx, host.Grant{ID: 1, Host: taskNQN, Mode: host.GrantRead, Lease: time.Hour,
		Extents: []pushdown.Extent{{LBA: 3000, Blocks: 1}}}); err != nil {
		t.Fatal(err)
	}
	taskFile := pushdown.File{Size: bs, Extents: []pushdown.Extent{{LBA: 3000, Blocks: 1}}}
	res, err := task.LambdaRead(ctx, fn, []pushdown.File{taskFile}, host.Start{Length: bs}, nil, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) != n || !bytes.Equal(res.Output[:bs], mine) {
		t.Fatalf("the task host's own block did not come back first (%d bytes)", len(res.Output))
	}
	leaked := 0
	for _, b := range res.Output[bs:] {
		if b != 0 {
			leaked++
		}
	}
	if leaked != 0 {
		t.Fatalf("the task host received %d bytes it never read", leaked)
	}
}

package offloadfs_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// errCrashed is what a crashed owner's device and target connection
// return: it can no longer write, commit or release anything.
var errCrashed = errors.New("the owner crashed")

// crashDevice stops doing I/O once crashed is set.
type crashDevice struct {
	offloadfs.Device
	crashed *atomic.Bool
}

func (d crashDevice) ReadAt(p []byte, off int64) (int, error) {
	if d.crashed.Load() {
		return 0, errCrashed
	}
	return d.Device.ReadAt(p, off)
}

func (d crashDevice) WriteAt(p []byte, off int64) (int, error) {
	if d.crashed.Load() {
		return 0, errCrashed
	}
	return d.Device.WriteAt(p, off)
}

func (d crashDevice) Flush(ctx context.Context) error {
	if d.crashed.Load() {
		return errCrashed
	}
	return d.Device.Flush(ctx)
}

// crashRemote stops releasing grants once crashed is set, as an owner
// that died would.
type crashRemote struct {
	offloadfs.Remote
	crashed *atomic.Bool
}

func (r crashRemote) ReleaseGrant(ctx context.Context, id uint64) error {
	if r.crashed.Load() {
		return errCrashed
	}
	return r.Remote.ReleaseGrant(ctx, id)
}

// TestGrantsEndAtRemount: an owner that crashes leaves its grants at the
// target, where the grantee can still write the blocks. The next
// read-write mount ends them before it can reuse any block, so from then
// on the grantee is denied.
func TestGrantsEndAtRemount(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	// Replace the environment's mount by one that can crash.
	if err := e.fsys.Close(); err != nil {
		t.Fatal(err)
	}
	var crashed atomic.Bool
	opts := offloadfs.Options{
		CommitInterval: -1,
		Logger:         slog.New(slog.DiscardHandler),
		Loader:         e.ctrl,
		Runtimes:       []sandbox.Runtime{e.hrt},
		FunctionLimits: limits,
		Remote:         crashRemote{Remote: e.ns, crashed: &crashed},
	}
	first, err := offloadfs.Mount(ctx, crashDevice{Device: e.ns, crashed: &crashed}, opts)
	if err != nil {
		t.Fatal(err)
	}
	f, err := first.Create("shared")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 32<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := first.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	_, task := e.connect(taskNQN, 1)
	// A task host registers before writing under a grant: the namespace
	// stays reserved for its owners (the environment's mount parked it).
	if err := task.Register(ctx, host.RegisterOpts{Action: host.RegisterKey, NewKey: 7}); err != nil {
		t.Fatal(err)
	}
	g, err := first.Grant(ctx, taskNQN, []*offloadfs.File{f}, pushdown.GrantReadWrite, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	x := g.Extents()[0]
	write := func() error {
		_, err := task.WriteAtContext(ctx, make([]byte, bs), int64(x.LBA)*bs)
		return err
	}
	if err := write(); err != nil {
		t.Fatalf("the grantee writing its grant: %v", err)
	}

	crashed.Store(true)
	_ = first.Close() // fails: nothing reaches the device or the target
	if err := write(); err != nil {
		t.Fatalf("after the owner's crash, before a remount, the target still holds the grant: %v", err)
	}

	opts.Remote = e.ns
	second, err := offloadfs.Mount(ctx, e.ns, opts)
	if err != nil {
		t.Fatal(err)
	}
	e.fsys = second // closed by the environment's cleanup
	// The remount fenced the grants, which ended the grantee's standing
	// and with it its registration: it may not write.
	if err := write(); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("the grantee writing after the owner remounted: %v, want Reservation Conflict", err)
	}
	// The file is intact and can be truncated: nothing pins it now.
	h, err := second.OpenFile("shared", os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Truncate(0); err != nil {
		t.Fatalf("truncating the once-granted file after the remount: %v", err)
	}
}

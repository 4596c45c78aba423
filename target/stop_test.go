package target_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/volume"
)

// stuckVolume is a volume whose reads wait until it is closed: a device
// that stopped answering. It is not in memory, so the target runs its
// reads on goroutines of their own.
type stuckVolume struct {
	volume.Volume
	reading chan struct{} // a read has started waiting
	closed  chan struct{}
	once    sync.Once
}

func (v *stuckVolume) ReadAt(p []byte, off int64) (int, error) {
	select {
	case v.reading <- struct{}{}:
	default:
	}
	<-v.closed
	return v.Volume.ReadAt(p, off)
}

func (v *stuckVolume) Close() error {
	v.once.Do(func() { close(v.closed) })
	return v.Volume.Close()
}

// TestStopWithReadStuckInBackend: Close, and Shutdown once its grace period
// is over, return promptly while a read waits in the backend — they do not
// wait for it — and once the backend lets go, nothing of the target is
// left running.
func TestStopWithReadStuckInBackend(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(*testtarget.Target) error
		want error
	}{
		{"Close", func(s *testtarget.Target) error { s.Stop(); return nil }, nil},
		{"Shutdown past its grace period", func(s *testtarget.Target) error {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			return s.Shutdown(ctx)
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaks := testtarget.LeakCheck(t)
			mem, err := volume.Open("mem:1MiB")
			noErr(t, err)
			v := &stuckVolume{Volume: mem, reading: make(chan struct{}, 1), closed: make(chan struct{})}
			defer v.Close()
			tgt := testtarget.Start(t, testtarget.Config{NQN: "nqn.2026-11.io.nearstore:stop", Name: "stuck", Volume: v})
			t.Cleanup(tgt.Stop)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctrl, err := host.Connect(ctx, tgt.Addr(), "nqn.2026-11.io.nearstore:stop", host.Options{KeepAlive: -1})
			noErr(t, err)
			defer ctrl.Close()
			ns, err := ctrl.Namespace(1)
			noErr(t, err)
			read := make(chan error, 1)
			go func() {
				_, err := ns.ReadAtContext(ctx, make([]byte, 4096), 0)
				read <- err
			}()
			select {
			case <-v.reading:
			case <-ctx.Done():
				t.Fatal("the read never reached the backend")
			}

			stopped := make(chan error, 1)
			go func() { stopped <- tc.stop(tgt) }()
			select {
			case err := <-stopped:
				if !errors.Is(err, tc.want) {
					t.Fatalf("stopping: %v, want %v", err, tc.want)
				}
			case <-time.After(5 * time.Second):
				v.Close()
				<-stopped
				t.Fatal("stopping waited for the read stuck in the backend")
			}
			if err := <-read; err == nil {
				t.Fatal("the stuck read completed successfully")
			}

			ctrl.Close()
			v.Close()
			leaks()
		})
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

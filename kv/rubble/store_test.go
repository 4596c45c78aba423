package rubble

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

func openTestStore(t *testing.T, window time.Duration) *Store {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	vol, err := volume.Open("mem:64MiB?bs=4096")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	dev := offloadfs.VolumeDevice(vol)
	if err := offloadfs.Mkfs(ctx, dev, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	fsys, err := offloadfs.Mount(ctx, dev, offloadfs.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	s, err := OpenStore(ctx, StoreConfig{ID: "n1", FS: fsys, Dir: "g0", Slots: 4, SlotSize: 1 << 20,
		Dialer: &TargetDialer{}, FallbackWindow: window, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestFallbackDue checks the measured trigger: a window in which
// shipping took longer than the store's own flushes and compactions
// (and over a second) makes the group fall back; a window without
// shipping does not, nor one that has not ended.
func TestFallbackDue(t *testing.T) {
	s := openTestStore(t, 20*time.Millisecond)
	if s.fallbackDue() {
		t.Fatal("due before the first window ended")
	}
	time.Sleep(30 * time.Millisecond)
	s.mu.Lock()
	s.stats.ShipTime += 3 * time.Second
	s.mu.Unlock()
	if !s.fallbackDue() {
		t.Fatal("3s of shipping against no local work: not due")
	}
	time.Sleep(30 * time.Millisecond)
	if s.fallbackDue() {
		t.Fatal("a window without shipping: due")
	}
	s.mu.Lock()
	s.stats.ShipTime += 500 * time.Millisecond
	s.mu.Unlock()
	time.Sleep(30 * time.Millisecond)
	if s.fallbackDue() {
		t.Fatal("half a second of shipping (under the one-second floor): due")
	}
}

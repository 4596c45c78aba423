package fusefs_test

import (
	"context"
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nearstore/nearstore/offloadfs"
)

// TestModTimes: modification times set through the mount (by path, by a
// descriptor, on a file removed while open, on a directory) are stored,
// survive a remount, and leave the extent-map version alone; a time
// offloadfs cannot store fails with EINVAL; setting the access time alone
// is accepted and changes nothing.
func TestModTimes(t *testing.T) {
	dev := newDevice(t, 16<<20)
	fsys := mountRW(t, dev)
	dir, srv := serve(t, fsys)
	p := func(name string) string { return filepath.Join(dir, name) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(p("d"), 0o755))
	must(os.WriteFile(p("d/f"), randBytes(1, 5000), 0o644))
	before, err := fsys.Stat("d/f")
	must(err)

	times := map[string]time.Time{
		"d/f": time.Date(1999, 12, 31, 23, 59, 59, 123456789, time.UTC),
		"d":   time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC),
		// Before 1970: negative Unix times are times too.
		"g": time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC),
	}
	must(os.WriteFile(p("g"), nil, 0o644))
	// Committed first, so the times are all the next commit has to
	// write.
	must(fsys.Sync(context.Background()))
	for name, mt := range times {
		must(os.Chtimes(p(name), time.Now(), mt))
	}

	// Through a descriptor (futimens), on a file removed while open.
	f, err := os.OpenFile(p("gone"), os.O_RDWR|os.O_CREATE, 0o644)
	must(err)
	must(os.Remove(p("gone")))
	goneTime := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC)
	ts := []unix.Timespec{unix.NsecToTimespec(goneTime.UnixNano()), unix.NsecToTimespec(goneTime.UnixNano())}
	must(unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), ts, 0))
	fi, err := f.Stat()
	must(err)
	if !fi.ModTime().Equal(goneTime) {
		t.Errorf("removed open file: mtime %v, want %v", fi.ModTime(), goneTime)
	}
	must(f.Close())

	// The access time alone: accepted, nothing changes.
	atimeOnly := []unix.Timespec{unix.NsecToTimespec(0), {Nsec: unix.UTIME_OMIT}}
	must(unix.UtimesNanoAt(unix.AT_FDCWD, p("d/f"), atimeOnly, 0))

	// Out of range: EINVAL, and nothing changes.
	far := []unix.Timespec{{Sec: 1 << 40}, {Sec: 1 << 40}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p("d/f"), far, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("utimes to the year 36812: %v, want EINVAL", err)
	}

	check := func(when string, stat func(string) (iofs.FileInfo, error)) {
		t.Helper()
		for name, mt := range times {
			fi, err := stat(name)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if !fi.ModTime().Equal(mt) {
				t.Errorf("%s: %s: mtime %v, want %v", when, name, fi.ModTime().UTC(), mt)
			}
		}
	}
	check("through the mount", func(name string) (iofs.FileInfo, error) { return os.Stat(p(name)) })
	check("through offloadfs", fsys.Stat)
	after, err := fsys.Stat("d/f")
	must(err)
	if v0, v1 := before.Sys().(*offloadfs.FileInfo).Version(), after.Sys().(*offloadfs.FileInfo).Version(); v0 != v1 {
		t.Errorf("setting the mtime changed the extent-map version %d to %d", v0, v1)
	}

	// Committed like any change: a crash-free remount, read-only, sees them.
	must(srv.Unmount())
	must(fsys.Close())
	ro, err := offloadfs.MountReadOnly(context.Background(), dev, offloadfs.Options{})
	must(err)
	defer ro.Close()
	check("after remounting", ro.Stat)
	if err := ro.SetModTime("d/f", time.Now()); !errors.Is(err, offloadfs.ErrReadOnly) {
		t.Errorf("SetModTime on a read-only mount: %v, want ErrReadOnly", err)
	}
	rodir, _ := serve(t, ro)
	if err := os.Chtimes(filepath.Join(rodir, "d/f"), time.Now(), time.Now()); !errors.Is(err, syscall.EROFS) {
		t.Errorf("utimes on a read-only mount: %v, want EROFS", err)
	}
}

//go:build linux

package volume

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// allocatedBlocks returns st_blocks (512-byte units actually allocated).
func allocatedBlocks(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}

// TestFilePunchHole checks that Deallocate really frees space, not just
// that it reads back zeroes.
func TestFilePunchHole(t *testing.T) {
	for _, query := range []string{"", "&direct=1"} {
		t.Run("query="+query, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vol.img")
			v := openTest(t, "file:"+path+"?size=4MiB"+query)
			data := randBuf(rand.New(rand.NewPCG(8, 9)), 4<<20)
			if _, err := v.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
			before := allocatedBlocks(t, path)
			if err := v.Deallocate(1<<20, 2<<20); err != nil {
				t.Fatal(err)
			}
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
			after := allocatedBlocks(t, path)
			if v.(*fileVolume).noPunch.Load() {
				t.Skipf("file system at %s cannot punch holes; Deallocate fell back to writing zeroes", path)
			}
			// The whole 2 MiB should be gone; allow for file system
			// granularity.
			if freed := (before - after) * 512; freed < 1<<20 {
				t.Errorf("Deallocate of 2 MiB freed %d bytes (st_blocks %d -> %d)", freed, before, after)
			}
			clear(data[1<<20 : 3<<20])
			if got := readAll(t, v); !bytes.Equal(got, data) {
				t.Errorf("contents after Deallocate: first difference at %d", firstDiff(got, data))
			}
		})
	}
}

// TestDeviceLoop runs the device backend against loop devices, with 512 and
// 4096-byte sectors (the latter forces 4 KiB O_DIRECT alignment under a
// 512-byte advertised block size).
func TestDeviceLoop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to set up a loop device")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not installed")
	}
	for _, sector := range []int{512, 4096} {
		t.Run(fmt.Sprint("sector", sector), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "loop.img")
			if err := os.WriteFile(img, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(img, 4<<20); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("losetup", "--find", "--show", "--sector-size", fmt.Sprint(sector), img).CombinedOutput()
			if err != nil {
				t.Skipf("cannot set up a loop device: %v: %s", err, out)
			}
			dev := strings.TrimSpace(string(out))
			t.Cleanup(func() {
				if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
					t.Errorf("losetup -d %s: %v: %s", dev, err, out)
				}
			})

			v := openTest(t, "dev:"+dev+"?bs=512")
			fv := v.(*fileVolume)
			if v.Size() != 4<<20 || fv.align != int64(sector) || !fv.direct {
				t.Fatalf("dev volume: size %d align %d direct %v; want %d, %d, true", v.Size(), fv.align, fv.direct, 4<<20, sector)
			}
			runModel(t, v, make([]byte, v.Size()), rand.New(rand.NewPCG(10, uint64(sector))), 300)
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}

			// The default block size is the sector size.
			d := openTest(t, "dev:"+dev)
			if d.BlockSize() != sector {
				t.Errorf("default bs = %d; want %d", d.BlockSize(), sector)
			}
		})
	}
}

func TestDeviceNotFound(t *testing.T) {
	_, err := Open("dev:/dev/nearstore-does-not-exist")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(missing device) = %v; want ErrNotExist", err)
	}
}

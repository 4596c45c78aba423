package fuse_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/offloadfs"
)

// TestCLI round-trips files through the `nearstore fs` commands and checks
// each against the Go API: what they print, what they leave behind, and
// that mistakes are clear errors with exit status 1.
func TestCLI(t *testing.T) {
	e := newEnv(t)
	local := t.TempDir()

	// Nothing on the namespace yet; mkfs makes one and refuses to
	// overwrite it without --force.
	e.fails("holds no offloadfs", "ls")
	e.ok("mkfs", "--block-size", "4KiB", "--inodes", "1000")
	e.fails("already holds an offloadfs", "mkfs")
	e.ok("mkfs", "--force", "--inodes", "1000")

	e.ok("mkdir", "-p", "/d/e")
	e.fails("file exists", "mkdir", "/d")
	e.fails("no such file or directory", "mkdir", "/x/y")

	// put: a local file, stdin, and into a directory under the file's
	// own name.
	writeRandom(t, filepath.Join(local, "f"), 1<<20+7, 1)
	e.ok("put", filepath.Join(local, "f"), "/d/e/f")
	stdin := []byte("from stdin\n")
	e.okIn(stdin, "put", "-", "/d/g")
	e.ok("put", filepath.Join(local, "f"), "/d/")
	e.fails("is a directory", "put", local, "/d/h")
	e.fails("no such file or directory", "put", filepath.Join(local, "f"), "/nope/f")

	// get, cat and get to stdout return the bytes.
	want, _ := os.ReadFile(filepath.Join(local, "f"))
	e.ok("get", "/d/e/f", filepath.Join(local, "f2"))
	if got, _ := os.ReadFile(filepath.Join(local, "f2")); !bytes.Equal(got, want) {
		t.Fatalf("get: %d bytes back, want %d", len(got), len(want))
	}
	if got := e.ok("get", "d/f", "-"); got != string(want) {
		t.Fatalf("get to stdout: %d bytes, want %d", len(got), len(want))
	}
	if got := e.ok("cat", "/d/g", "/d/g"); got != string(stdin)+string(stdin) {
		t.Fatalf("cat: %q", got)
	}
	e.fails("is a directory", "cat", "/d")
	e.fails("no such file or directory", "cat", "/nope")
	e.fails("is a directory", "get", "/d", filepath.Join(local, "x"))

	// ls, plain, long, recursive and JSON.
	if got := e.ok("ls"); got != "d/\n" {
		t.Fatalf("ls: %q", got)
	}
	if got := e.ok("ls", "-R", "/"); got != "d/\nd/e/\nd/e/f\nd/f\nd/g\n" {
		t.Fatalf("ls -R: %q", got)
	}
	if got := e.ok("ls", "-l", "/d/g"); !strings.Contains(got, "file") || !strings.Contains(got, " 11 ") || !strings.Contains(got, "g\n") {
		t.Fatalf("ls -l of a file: %q", got)
	}

	// stat prints the versioned extent map the Go API reports.
	var st struct {
		Path            string `json:"path"`
		Type            string `json:"type"`
		Size            int64  `json:"size"`
		Inode           uint64 `json:"inode"`
		Version         uint64 `json:"version"`
		DeviceBlockSize int    `json:"device_block_size"`
		Extents         []struct {
			FileOffset int64  `json:"file_offset"`
			LBA        uint64 `json:"lba"`
			Blocks     uint32 `json:"blocks"`
		} `json:"extents"`
	}
	if err := json.Unmarshal([]byte(e.ok("stat", "--json", "/d/e/f")), &st); err != nil {
		t.Fatal(err)
	}
	if text := e.ok("stat", "/d/e/f"); !strings.Contains(text, "version:") || !strings.Contains(text, "LBA") {
		t.Fatalf("stat:\n%s", text)
	}
	// stat printed the file's versioned extent map as the Go API has it.
	fsys := e.readOnly()
	f, err := fsys.Open("/d/e/f")
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.Extents()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var off int64
	ok := st.Path == "/d/e/f" && st.Type == "file" && st.Size == int64(len(want)) && st.DeviceBlockSize == e.ns.BlockSize() &&
		len(st.Extents) == len(m.Extents) && st.Size == int64(m.Size)
	for i, x := range st.Extents {
		ok = ok && x.LBA == m.Extents[i].LBA && x.Blocks == m.Extents[i].Blocks && x.FileOffset == off
		off += int64(x.Blocks) * int64(st.DeviceBlockSize)
	}
	if !ok || off < st.Size {
		t.Fatalf("stat --json %+v\nGo API: %+v", st, m)
	}
	if st.Inode != m.ID || st.Version != m.Version {
		t.Fatalf("stat --json: inode %d version %d, Go API %d %d", st.Inode, st.Version, m.ID, m.Version)
	}
	fsys.Close()
	e.fails("no such file or directory", "stat", "/d/nope")

	// mv: into a directory, across directories, over a file; rm.
	e.ok("mv", "/d/g", "/d/e")
	e.ok("mv", "/d/e/g", "/h")
	e.ok("mv", "/d/f", "/h") // replaces h
	e.fails("no such file or directory", "mv", "/nope", "/d")
	e.fails("is a directory (use -r)", "rm", "/d")
	e.ok("rm", "/d/e/f")
	e.fails("no such file or directory", "rm", "/d/e/f")
	e.ok("rm", "-f", "/d/e/f")
	e.ok("put", filepath.Join(local, "f"), "/d/e/again")
	e.ok("rm", "-r", "/d/e")
	if got := e.ok("ls", "-R"); got != "d/\nh\n" {
		t.Fatalf("ls -R after mv and rm: %q", got)
	}

	// df and fsck agree with the Go API.
	var df struct {
		BlockSize  int    `json:"block_size"`
		Inodes     uint64 `json:"inodes"`
		FreeInodes uint64 `json:"free_inodes"`
		FreeBlocks uint64 `json:"free_blocks"`
	}
	if err := json.Unmarshal([]byte(e.ok("df", "--json")), &df); err != nil {
		t.Fatal(err)
	}
	if out := e.ok("fsck"); !strings.Contains(out, "fsck: clean") || !strings.Contains(out, "1 files, 2 directories") {
		t.Fatalf("fsck: %q", out)
	}

	fsys = e.readOnly()
	if d := fsTree(t, fsys).diff(tree{"d/": "", "h": md5Hex(want)}); d != "" {
		t.Fatalf("after the CLI, offloadfs holds:\n%s", d)
	}
	u := fsys.Usage()
	if df.BlockSize != 4096 || df.Inodes != u.Inodes || df.FreeInodes != u.FreeInodes || df.FreeBlocks != u.FreeBlocks || u.Inodes > 1000 {
		t.Fatalf("df %+v, Go API %+v", df, u)
	}
}

// TestCLIFsckDamage: fsck finds a damaged inode record, prints it and
// exits 1.
func TestCLIFsckDamage(t *testing.T) {
	e := newEnv(t)
	e.mkfs()
	local := t.TempDir()
	writeRandom(t, filepath.Join(local, "f"), 10000, 2)
	e.ok("put", filepath.Join(local, "f"), "/f")
	fsys := e.readOnly()
	fi, err := fsys.Stat("/f")
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(interface{ Ino() uint64 }).Ino()
	fsys.Close()

	// Flip a byte of the file's inode record, where docs/OFFLOADFS.md
	// puts it: the superblock gives the block size (bytes 16-19) and the
	// inode table's first block (96-103); records are 256 bytes.
	sb := make([]byte, 512)
	if _, err := e.ns.ReadAt(sb, 0); err != nil {
		t.Fatal(err)
	}
	bs := int64(binary.LittleEndian.Uint32(sb[16:]))
	itable := int64(binary.LittleEndian.Uint64(sb[96:]))
	at := itable*bs + int64(ino)*256 + 24 // the size field
	b := make([]byte, 1)
	if _, err := e.ns.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	// The namespace stays reserved for the file system's owners after
	// put's unmount; free it, as `io verify --force` does.
	if err := offloadfs.Evict(context.Background(), e.ns, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ns.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	if err := e.ns.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := e.failsWith(4, "fsck found problems", "fsck") // e2fsck's "errors left uncorrected"
	if !strings.Contains(out, "problem:") {
		t.Fatalf("fsck report: %q", out)
	}
	var rep struct {
		OK       bool     `json:"ok"`
		Problems []string `json:"problems"`
	}
	if err := json.Unmarshal([]byte(e.failsWith(4, "fsck found problems", "fsck", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.OK || !slices.ContainsFunc(rep.Problems, func(p string) bool { return strings.Contains(p, "inode") }) {
		t.Fatalf("fsck --json: %+v", rep)
	}
}

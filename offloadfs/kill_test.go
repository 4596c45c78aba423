package offloadfs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/internal/testproc"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

// killRecord is the deterministic content of record i of the kill test.
func killRecord(i int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("<%d>", i)), 1+i%700)
}

const killChildEnv = "OFFLOADFS_KILL_CHILD"

// TestKillProcess runs a workload in a child process on a file volume,
// kills it (SIGKILL) at an arbitrary moment, and checks that a mount finds
// everything the child reported synced.
func TestKillProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	ctx := context.Background()
	spec := "file:" + filepath.Join(t.TempDir(), "vol") + "?size=64MiB"
	v, err := volume.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := offloadfs.Mkfs(ctx, offloadfs.VolumeDevice(v), offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	for round, target := range []int{40, 120} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), killChildEnv+"="+spec)
		p := testproc.Start(t, cmd)
		synced := -1
		deadline := time.Now().Add(2 * time.Minute)
		for line := range p.Lines {
			if n, ok := strings.CutPrefix(line, "synced "); ok {
				synced, _ = strconv.Atoi(n)
			}
			if synced >= target || time.Now().After(deadline) {
				break
			}
		}
		p.Kill()
		if synced < 0 {
			t.Fatalf("round %d: the child synced nothing", round)
		}

		fsys, err := offloadfs.Mount(ctx, offloadfs.VolumeDevice(v), testfs.Quiet())
		if err != nil {
			t.Fatalf("round %d: mount after kill: %v", round, err)
		}
		checkFsck(t, fsys, fmt.Sprintf("round %d", round))
		var log []byte
		for i := 0; i <= synced; i++ {
			want := killRecord(i)
			log = append(log, want...)
			f, err := fsys.Open(fmt.Sprintf("r%d/%d", round, i))
			if err != nil {
				t.Fatalf("round %d: record %d of %d synced: %v", round, i, synced, err)
			}
			got, err := io.ReadAll(f)
			f.Close()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("round %d: record %d differs (%v)", round, i, err)
			}
		}
		f, err := fsys.Open(fmt.Sprintf("r%d/log", round))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil || len(got) < len(log) || !bytes.Equal(got[:len(log)], log) {
			t.Fatalf("round %d: the log lost synced records (%d bytes, want at least %d; %v)", round, len(got), len(log), err)
		}
		t.Logf("round %d: killed after %d synced records; %d log bytes survived", round, synced+1, len(got))
		if err := fsys.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKillChild is TestKillProcess's child: it writes records as files
// and appends them to a log, syncing after each and reporting it, until
// it is killed.
func TestKillChild(t *testing.T) {
	spec := os.Getenv(killChildEnv)
	if spec == "" {
		t.Skip("run by TestKillProcess")
	}
	v, err := volume.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := offloadfs.Mount(context.Background(), offloadfs.VolumeDevice(v), offloadfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	round := 0
	for ; ; round++ {
		if _, err := fsys.Stat(fmt.Sprintf("r%d", round)); err != nil {
			break
		}
	}
	dir := fmt.Sprintf("r%d", round)
	if err := fsys.Mkdir(dir); err != nil {
		t.Fatal(err)
	}
	log, err := fsys.OpenFile(dir+"/log", os.O_WRONLY|os.O_CREATE|os.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100000; i++ {
		rec := killRecord(i)
		f, err := fsys.Create(fmt.Sprintf("%s/%d", dir, i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(rec); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := log.Write(rec); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			// Unsynced work in flight when the kill comes.
			continue
		}
		if err := log.Sync(); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("synced %d\n", i)
	}
}

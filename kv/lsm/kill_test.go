package lsm

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/vfs"
)

const killChildEnv = "LSM_KILL_CHILD_DIR"

// killChild is the child side of TestKilledProcess: it writes batches
// c%08d forever, every third one synced, and prints the index of each
// acknowledged synced batch.
func killChild(dir string) {
	opts := smallOptions()
	opts.MemTableSize = 16 << 10
	d, err := Open(vfs.OS(""), dir, opts)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		b := NewBatch()
		b.Set([]byte(fmt.Sprintf("c%08d", i)), []byte(fmt.Sprintf("value-%d-%0100d", i, i)))
		b.Set([]byte(fmt.Sprintf("d%08d", i)), []byte("twin"))
		sync := i%3 == 0
		if err := d.Apply(context.Background(), b, &WriteOptions{Sync: sync}); err != nil {
			fmt.Fprintln(w, "error", err)
			w.Flush()
			os.Exit(1)
		}
		if sync {
			fmt.Fprintln(w, i)
			w.Flush()
		}
	}
}

// TestKilledProcess runs a writer in a child process on the local file
// system, kills it with SIGKILL mid-stream, and checks the store reopens
// with every acknowledged synced batch, each batch whole, and the
// batches present forming a prefix of those written.
func TestKilledProcess(t *testing.T) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		killChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	for round := 0; round < 3; round++ {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledProcess$")
		cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		acked := -1
		// Kill at a different point each round, after some flushes.
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "error") {
				t.Fatalf("child: %s", line)
			}
			n, err := strconv.Atoi(line)
			if err != nil {
				continue
			}
			acked = n
			if acked >= 1500+round*700 {
				break
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		if acked < 0 {
			t.Fatal("child acknowledged nothing")
		}
		d, err := Open(vfs.OS(""), dir, smallOptions())
		if err != nil {
			t.Fatalf("reopen after kill: %v", err)
		}
		present := 0
		for i := 0; ; i++ {
			v, err := d.Get([]byte(fmt.Sprintf("c%08d", i)))
			_, err2 := d.Get([]byte(fmt.Sprintf("d%08d", i)))
			if (err == nil) != (err2 == nil) {
				t.Fatalf("batch %d recovered in part", i)
			}
			if err != nil {
				break
			}
			if want := fmt.Sprintf("value-%d-%0100d", i, i); string(v) != want {
				t.Fatalf("batch %d value %q", i, v)
			}
			present++
		}
		if present <= acked {
			t.Fatalf("acknowledged synced batch %d, recovered only %d batches", acked, present)
		}
		it, err := d.NewIter(&IterOptions{LowerBound: []byte("c"), UpperBound: []byte("d")})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		if n != present {
			t.Fatalf("%d batches after a gap: recovered batches are not a prefix", n-present)
		}
		m := d.Metrics()
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: acknowledged %d, recovered %d batches; %d tables", round, acked, present, m.Levels[0].Tables+m.Levels[1].Tables+m.Levels[2].Tables)
	}
}

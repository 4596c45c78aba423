// Package lsmoffload_test kills the processes of an OffloadDB store at
// random points of its offloaded flushes and compactions: the host (this test binary
// started again in the role LSMOFFLOAD_ROLE=host, writing synced
// records), the engine (the target process, `nearstore target serve
// --offload`, whose engine runs the compactions), or both. After a
// restart every acknowledged synced write must be there, and the file
// system's fsck must be clean.
package lsmoffload_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testproc"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offloadfs"
)

const (
	testNQN  = "nqn.2026-11.io.nearstore:lsm-offload-crash"
	ownerNQN = "nqn.2026-11.io.nearstore:lsm-offload-owner"
)

func TestMain(m *testing.M) {
	switch os.Getenv("LSMOFFLOAD_ROLE") {
	case "":
		clitest.Main(m)
	case "host":
		err := hostMain()
		fmt.Fprintln(os.Stderr, "host:", err)
		os.Exit(1)
	}
	os.Exit(2)
}

// storeOptions make a store that flushes and compacts all the time.
func storeOptions() lsm.Options {
	return lsm.Options{
		MemTableSize:          64 << 10,
		L0CompactionThreshold: 2,
		LBaseMaxBytes:         256 << 10,
		TargetFileSize:        64 << 10,
		Logger:                slog.New(slog.DiscardHandler),
	}
}

func key(i int) []byte { return []byte(fmt.Sprintf("key%08d", i*7919%1000003)) }

func value(i int) []byte {
	v := []byte(fmt.Sprintf("value-%08d-", i))
	for len(v) < 600 {
		v = append(v, byte('a'+(i+len(v))%26))
	}
	return v
}

// hostMain is the host: it mounts the file system, opens the store with
// compaction offload and log recycling to the engine at
// LSMOFFLOAD_ENGINE, and writes records with Sync until killed, printing
// "ack N" once record N is durable and "offloaded N" as the engine's
// compactions and flushes add up.
func hostMain() error {
	ctx := context.Background()
	ctrl, err := host.Connect(ctx, os.Getenv("LSMOFFLOAD_TARGET"), testNQN, host.Options{HostNQN: ownerNQN, IOQueues: 2})
	if err != nil {
		return err
	}
	ns, err := ctrl.Namespace(1)
	if err != nil {
		return err
	}
	fsys, err := offloadfs.Mount(ctx, ns, offloadfs.Options{Remote: ns, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	peer, err := offload.Dial(os.Getenv("LSMOFFLOAD_ENGINE"), offload.ClientOptions{Name: "crash-host"})
	if err != nil {
		return err
	}
	opts := storeOptions()
	opts.Offload = &lsm.OffloadOptions{FS: fsys, Peer: peer, Compaction: true, Recycle: true}
	d, err := lsm.Open(fsys.VFS(), "db", opts)
	if err != nil {
		return err
	}
	var reported uint64
	for i := 0; ; i++ {
		if err := d.Set(key(i), value(i), &lsm.WriteOptions{Sync: true}); err != nil {
			return err
		}
		fmt.Println("ack", i)
		if m := d.OffloadMetrics(); m.Compactions+m.Flushes != reported {
			n := m.Compactions + m.Flushes
			reported = n
			fmt.Println("offloaded", n)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// target is the target process with its engine, on a volume file that
// outlives it.
type target struct {
	t            *testing.T
	bin, vol     string
	addr, engine string
	p            *testproc.Proc
}

func (tg *target) start() {
	tg.t.Helper()
	tg.p = testproc.Start(tg.t, exec.Command(tg.bin, "target", "serve", "--log-level", "warn", "--listen", tg.addr, "--nqn", testNQN,
		"--volume", "file:"+tg.vol+"?size=256MiB", "--offload", tg.engine))
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range []string{tg.addr, tg.engine} {
		for {
			c, err := net.Dial("tcp", a)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				tg.t.Fatalf("the target does not listen on %s", a)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// mount connects as the owner and mounts the file system.
func (tg *target) mount(ctx context.Context) (*offloadfs.FS, func()) {
	tg.t.Helper()
	ctrl, ns := testhost.Connect(tg.t, tg.addr, testNQN, 1, host.Options{HostNQN: ownerNQN, IOQueues: 2})
	fsys, err := offloadfs.Mount(ctx, ns, offloadfs.Options{Remote: ns, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tg.t.Fatal(err)
	}
	return fsys, func() {
		if err := fsys.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			tg.t.Errorf("unmount: %v", err)
		}
		ctrl.Close()
	}
}

// TestKillDuringOffloadedTasks: for each of host, engine and both,
// a few times, the victim is killed at a random moment after the engine
// has run some flushes and compactions, while more run; then everything restarts and
// every acknowledged record reads back, the store opens, and fsck is
// clean before and after.
func TestKillDuringOffloadedTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	bin := clitest.Binary(t)
	rounds := 2
	for _, victim := range []string{"host", "engine", "both"} {
		for round := range rounds {
			t.Run(fmt.Sprintf("%s/%d", victim, round), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(len(victim))))
				killRound(t, bin, victim, rng)
			})
		}
	}
}

func killRound(t *testing.T, bin, victim string, rng *rand.Rand) {
	ctx := context.Background()
	tg := &target{t: t, bin: bin, vol: filepath.Join(t.TempDir(), "vol.img"), addr: freeAddr(t), engine: freeAddr(t)}
	tg.start()
	// A fresh file system: mkfs through a connection of its own.
	ctrl, ns := testhost.Connect(t, tg.addr, testNQN, 1, host.Options{HostNQN: ownerNQN})
	if err := offloadfs.Mkfs(ctx, ns, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	ctrl.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LSMOFFLOAD_ROLE=host", "LSMOFFLOAD_TARGET="+tg.addr, "LSMOFFLOAD_ENGINE="+tg.engine)
	h := testproc.Start(t, cmd)
	acked := -1
	offloaded := 0
	killAfter := 1 + rng.IntN(8) // offloaded flushes and compactions before the kill
	for offloaded < killAfter {
		line, ok := <-h.Lines
		if !ok {
			t.Fatalf("the host ended after %d acks and %d offloaded tasks", acked+1, offloaded)
		}
		if n, ok := strings.CutPrefix(line, "ack "); ok {
			acked, _ = strconv.Atoi(n)
		} else if n, ok := strings.CutPrefix(line, "offloaded "); ok {
			offloaded, _ = strconv.Atoi(n)
		}
	}
	// Somewhere in the next compactions.
	stop := time.After(time.Duration(rng.IntN(300)) * time.Millisecond)
	collect := func(until <-chan time.Time) {
		for {
			select {
			case line, ok := <-h.Lines:
				if !ok {
					return
				}
				if n, ok := strings.CutPrefix(line, "ack "); ok {
					acked, _ = strconv.Atoi(n)
				}
			case <-until:
				return
			}
		}
	}
	collect(stop)
	switch victim {
	case "host":
		h.Kill()
	case "engine":
		tg.p.Kill()
		// The host lives on without its target for a moment, then
		// goes too: nothing it acknowledges after the kill can be
		// durable.
		collect(time.After(200 * time.Millisecond))
		h.Kill()
	case "both":
		tg.p.Kill()
		h.Kill()
	}
	collect(time.After(0)) // what it printed before it died
	for line := range h.Lines {
		if n, ok := strings.CutPrefix(line, "ack "); ok {
			acked, _ = strconv.Atoi(n)
		}
	}
	if victim != "host" {
		tg.start()
	}
	t.Logf("%s killed after %d acknowledged writes and %d offloaded flushes and compactions", victim, acked+1, offloaded)

	fsys, unmount := tg.mount(ctx)
	defer unmount()
	testfs.Fsck(t, fsys)
	d, err := lsm.Open(fsys.VFS(), "db", storeOptions())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= acked; i++ {
		v, err := d.Get(key(i))
		if err != nil || string(v) != string(value(i)) {
			t.Fatalf("acknowledged record %d of %d: %q, %v", i, acked+1, v, err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	testfs.Fsck(t, fsys)
}

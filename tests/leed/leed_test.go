// Package leed_test runs LEED's store behind the NVMe KV command set in a
// real target, reached over NVMe/TCP by the host library and by the
// nearstore binary.
package leed_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/kv/leed"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

const nqn = "nqn.2026-11.io.nearstore:leed-test"

func TestMain(m *testing.M) { clitest.Main(m) }

// rig is a target with an NVM namespace (1) and a KV namespace (2) on a
// file, which survives restarts of both the target and the store.
type rig struct {
	t     *testing.T
	path  string
	size  string
	nvm   volume.Volume
	kvVol volume.Volume
	store *leed.Store
	tgt   *testtarget.Target
	addr  string
}

func newRig(t *testing.T, size string) *rig {
	nvm, err := volume.Open("mem:8MiB")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nvm.Close() })
	r := &rig{t: t, path: t.TempDir() + "/kv.img", size: size, nvm: nvm}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *rig) start() {
	r.t.Helper()
	v, err := volume.Open("file:" + r.path + "?size=" + r.size)
	if err != nil {
		r.t.Fatal(err)
	}
	st, err := leed.Open(context.Background(), v, leed.Options{Create: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		v.Close()
		r.t.Fatal(err)
	}
	r.kvVol, r.store = v, st
	addr := r.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	r.tgt = testtarget.Start(r.t, testtarget.Config{
		NQN: nqn, Name: "nvm", Volume: r.nvm, Addr: addr,
		Namespaces: []target.NamespaceConfig{{Backend: v, Name: "kv:" + r.path, KV: &leed.Namespace{DB: st}}},
	})
	r.addr = r.tgt.Addr()
}

// stop stops the target and closes the store cleanly.
func (r *rig) stop() {
	if r.tgt == nil {
		return
	}
	r.tgt.Stop()
	r.tgt = nil
	if err := r.store.Close(); err != nil {
		r.t.Error(err)
	}
	r.kvVol.Close()
}

func (r *rig) restart() {
	r.stop()
	r.start()
}

func (r *rig) connect() (*host.Controller, *host.Namespace) {
	r.t.Helper()
	return testhost.Connect(r.t, r.addr, nqn, 2, host.Options{})
}

func (r *rig) cli(args ...string) clitest.Result {
	r.t.Helper()
	env := []string{"NEARSTORE_ADDR=" + r.addr, "NEARSTORE_NQN=" + nqn}
	return clitest.Run(r.t, 30*time.Second, nil, env, append([]string{"kv"}, append(args, "--nsid", "2")...)...)
}

func isStatus(err error, st nvme.Status) bool {
	return errors.Is(err, &nvme.StatusError{Status: st})
}

func TestHostLibrary(t *testing.T) {
	r := newRig(t, "64MiB")
	ctrl, ns := r.connect()
	ctx := context.Background()
	if !ns.IsKV() {
		t.Fatal("namespace 2 is not a KV namespace to the host")
	}
	id, err := ns.KVIdentify()
	if err != nil || id.MaxKey != 16 || id.MaxValue == 0 || id.NSZE != 64<<20 {
		t.Fatalf("KV identify %+v %v", id, err)
	}
	// The NVM namespace is what it was: 512-byte blocks, reads and writes.
	nvm, err := ctrl.Namespace(1)
	if err != nil || nvm.IsKV() || nvm.BlockSize() != 512 || nvm.Size() != 8<<20 {
		t.Fatalf("NVM namespace: %v kv=%v bs=%d size=%d", err, nvm != nil && nvm.IsKV(), nvm.BlockSize(), nvm.Size())
	}
	if _, err := nvm.WriteAt(bytes.Repeat([]byte{7}, 4096), 4096); err != nil {
		t.Fatal(err)
	}
	// An NVM command the KV command set does not share an opcode with
	// is refused (Read's 02h is Retrieve's there, without a key).
	if _, err := ns.IO(ctx, &nvme.Command{Opcode: nvme.IOWriteZeroes}, nil, nil); !isStatus(err, nvme.StatusInvalidOpcode) {
		t.Fatalf("NVM Write Zeroes to a KV namespace: %v", err)
	}
	if _, err := ns.IO(ctx, &nvme.Command{Opcode: nvme.IORead}, nil, make([]byte, 512)); !isStatus(err, nvme.StatusKVInvalidKeySize) {
		t.Fatalf("NVM Read to a KV namespace: %v", err)
	}

	if err := ns.Store(ctx, []byte("alpha"), []byte("one"), host.KVStoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, err := ns.Retrieve(ctx, []byte("alpha")); err != nil || string(v) != "one" {
		t.Fatalf("retrieve: %q %v", v, err)
	}
	if ok, err := ns.Exist(ctx, []byte("alpha")); !ok || err != nil {
		t.Fatalf("exist: %v %v", ok, err)
	}
	if ok, err := ns.Exist(ctx, []byte("beta")); ok || err != nil {
		t.Fatalf("exist of a missing key: %v %v", ok, err)
	}
	if _, err := ns.Retrieve(ctx, []byte("beta")); !isStatus(err, nvme.StatusKVKeyNotExist) {
		t.Fatalf("retrieve of a missing key: %v", err)
	}
	if err := ns.Store(ctx, []byte("alpha"), []byte("x"), host.KVStoreOptions{MustNotExist: true}); !isStatus(err, nvme.StatusKVKeyExists) {
		t.Fatalf("must-not-exist: %v", err)
	}
	if err := ns.Store(ctx, []byte("gamma"), []byte("x"), host.KVStoreOptions{MustExist: true}); !isStatus(err, nvme.StatusKVKeyNotExist) {
		t.Fatalf("must-exist: %v", err)
	}
	if err := ns.Store(ctx, []byte("big"), make([]byte, int(id.MaxValue)+1), host.KVStoreOptions{}); !isStatus(err, nvme.StatusKVInvalidValueSize) {
		t.Fatalf("value over the maximum: %v", err)
	}
	if err := ns.Delete(ctx, []byte("alpha")); err != nil {
		t.Fatal(err)
	}
	if err := ns.Delete(ctx, []byte("alpha")); !isStatus(err, nvme.StatusKVKeyNotExist) {
		t.Fatalf("second delete: %v", err)
	}

	// Many writers at once, under flow control; then List sees them all.
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				k := []byte(fmt.Sprintf("w%d-%d", w, i))
				if err := ns.Store(ctx, k, bytes.Repeat(k, 20), host.KVStoreOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	fl := ns.KVFlow()
	if fl.Credits <= 0 || fl.Outstanding != 0 {
		t.Fatalf("flow control after the writers: %+v", fl)
	}
	seen := map[string]bool{}
	var start []byte
	for {
		keys, err := ns.List(ctx, start, 256)
		if err != nil {
			t.Fatal(err)
		}
		if start != nil {
			keys = keys[1:]
		}
		if len(keys) == 0 {
			break
		}
		for _, k := range keys {
			if seen[string(k)] {
				t.Fatalf("List returned %q twice", k)
			}
			seen[string(k)] = true
		}
		start = keys[len(keys)-1]
	}
	if len(seen) != 800 {
		t.Fatalf("List found %d keys, want 800", len(seen))
	}
	// The target counted each command's device I/Os: a Retrieve is 2.
	before := r.tgt.Metric("nearstore_target_kv_device_ios_total", map[string]string{"op": "kv_retrieve"})
	if _, err := ns.Retrieve(ctx, []byte("w3-7")); err != nil {
		t.Fatal(err)
	}
	if got := r.tgt.Metric("nearstore_target_kv_device_ios_total", map[string]string{"op": "kv_retrieve"}) - before; got != 2 {
		t.Fatalf("a Retrieve took %v device I/Os, want 2", got)
	}
	if got, err := nvm.ReadAt(make([]byte, 4096), 4096); err != nil || got != 4096 {
		t.Fatal(err)
	}
}

func TestRestartReadsBack(t *testing.T) {
	r := newRig(t, "32MiB")
	_, ns := r.connect()
	ctx := context.Background()
	want := map[string][]byte{}
	for i := 0; i < 2000; i++ {
		k := fmt.Sprintf("key-%d", i)
		v := bytes.Repeat([]byte{byte(i)}, 100+i%900)
		if err := ns.Store(ctx, []byte(k), v, host.KVStoreOptions{}); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	for i := 0; i < 2000; i += 3 {
		k := fmt.Sprintf("key-%d", i)
		if err := ns.Delete(ctx, []byte(k)); err != nil {
			t.Fatal(err)
		}
		delete(want, k)
	}
	r.restart()
	_, ns = r.connect()
	for i := 0; i < 2000; i++ {
		k := fmt.Sprintf("key-%d", i)
		v, err := ns.Retrieve(ctx, []byte(k))
		if w, ok := want[k]; ok {
			if err != nil || !bytes.Equal(v, w) {
				t.Fatalf("after restart %s: %v", k, err)
			}
		} else if !isStatus(err, nvme.StatusKVKeyNotExist) {
			t.Fatalf("after restart, deleted %s: %v", k, err)
		}
	}
}

func TestCorruptBucketOnFile(t *testing.T) {
	clitest.Binary(t) // built before the clock of a command starts
	r := newRig(t, "16MiB")
	_, ns := r.connect()
	ctx := context.Background()
	for i := 0; i < 300; i++ {
		if err := ns.Store(ctx, []byte(fmt.Sprintf("c%03d", i)), []byte(fmt.Sprintf("value of %d", i)), host.KVStoreOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.stop()
	// Damage every bucket holding the key's item: its key bytes.
	img, err := os.ReadFile(r.path)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("c042")
	n := 0
	for off := 0; ; {
		i := bytes.Index(img[off:], key)
		if i < 0 {
			break
		}
		img[off+i+1] ^= 0x20
		n++
		off += i + len(key)
	}
	if n == 0 {
		t.Fatal("the key's item is nowhere in the file")
	}
	if err := os.WriteFile(r.path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	r.start()
	_, ns = r.connect()
	_, err = ns.Retrieve(ctx, key)
	if !isStatus(err, nvme.StatusKVUnrecoveredError) {
		t.Fatalf("retrieve over a corrupt bucket: %v, want Unrecovered Error", err)
	}
	if !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("error does not say what happened: %v", err)
	}
	// No other key answers with a wrong value.
	for i := 0; i < 300; i++ {
		v, err := ns.Retrieve(ctx, []byte(fmt.Sprintf("c%03d", i)))
		if err == nil && string(v) != fmt.Sprintf("value of %d", i) {
			t.Fatalf("c%03d: %q", i, v)
		}
		if err != nil && !isStatus(err, nvme.StatusKVUnrecoveredError) {
			t.Fatalf("c%03d: %v", i, err)
		}
	}
	// Through the CLI: a clear message, exit 1.
	res := r.cli("retrieve", "c042")
	if res.Code != 1 || !strings.Contains(res.Stderr, "corrupt") {
		t.Fatalf("cli retrieve of a corrupt key: exit %d, %q", res.Code, res.Stderr)
	}
}

func TestFullStoreLosesNothing(t *testing.T) {
	r := newRig(t, "4MiB")
	_, ns := r.connect()
	ctx := context.Background()
	stored := map[string][]byte{}
	var err error
	for i := 0; ; i++ {
		k := fmt.Sprintf("f%d", i)
		v := bytes.Repeat([]byte{byte(i)}, 1000)
		if err = ns.Store(ctx, []byte(k), v, host.KVStoreOptions{}); err != nil {
			break
		}
		stored[k] = v
	}
	if !isStatus(err, nvme.StatusCapacityExceeded) {
		t.Fatalf("filling the store: %v, want Capacity Exceeded", err)
	}
	if len(stored) < 2000 {
		t.Fatalf("a 4 MiB namespace took only %d 1000-byte values", len(stored))
	}
	r.restart()
	_, ns = r.connect()
	for k, v := range stored {
		got, err := ns.Retrieve(ctx, []byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("after Capacity Exceeded and a restart, %s: %v", k, err)
		}
	}
}

func TestCLI(t *testing.T) {
	clitest.Binary(t)
	r := newRig(t, "16MiB")
	run := func(want int, args ...string) string {
		t.Helper()
		res := r.cli(args...)
		if res.Code != want {
			t.Fatalf("kv %s: exit %d, want %d\n%s%s", strings.Join(args, " "), res.Code, want, res.Stdout, res.Stderr)
		}
		return res.Stdout + res.Stderr
	}
	run(0, "store", "user42", "hello world")
	if out := run(0, "retrieve", "user42"); out != "hello world" {
		t.Fatalf("retrieve printed %q", out)
	}
	run(0, "exist", "user42")
	if out := run(1, "exist", "nobody"); !strings.Contains(out, "does not exist") {
		t.Fatalf("exist of a missing key: %q", out)
	}
	if out := run(1, "store", "--must-not-exist", "user42", "x"); !strings.Contains(out, "Key Exists") {
		t.Fatalf("store --must-not-exist over a key: %q", out)
	}
	run(0, "store", "--hex", "00ff", "0102")
	if out := run(0, "retrieve", "--hex", "00ff"); strings.TrimSpace(out) != "0102" {
		t.Fatalf("hex retrieve: %q", out)
	}
	if out := run(0, "list"); !strings.Contains(out, "user42") {
		t.Fatalf("list: %q", out)
	}
	run(0, "delete", "user42")
	if out := run(1, "retrieve", "user42"); !strings.Contains(out, "does not exist") {
		t.Fatalf("retrieve after delete: %q", out)
	}
	run(2, "store", "seventeen-bytes-k", "v")
	// The restarted target still has what the CLI stored.
	r.restart()
	if out := run(0, "retrieve", "--hex", "00ff"); strings.TrimSpace(out) != "0102" {
		t.Fatalf("after restart: %q", out)
	}
	// An NVM namespace is told apart.
	res := clitest.Run(t, 30*time.Second, nil, []string{"NEARSTORE_ADDR=" + r.addr, "NEARSTORE_NQN=" + nqn}, "kv", "retrieve", "x", "--nsid", "1")
	if res.Code != 1 || !strings.Contains(res.Stderr, "not a Key Value namespace") {
		t.Fatalf("retrieve on the NVM namespace: %d %q", res.Code, res.Stderr)
	}
	// The help says which verbs are which.
	help := clitest.Run(t, 30*time.Second, nil, nil, "kv", "--help")
	if !strings.Contains(help.Stdout, "NVMe Key Value command set") || !strings.Contains(help.Stdout, "BPF-KV") {
		t.Fatalf("kv --help:\n%s", help.Stdout)
	}
}

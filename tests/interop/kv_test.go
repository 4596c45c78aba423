package interop_test

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/kv/leed"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/tests/interop"
	"github.com/nearstore/nearstore/volume"
)

// kvKeyParam is a key as the kv-host scenario takes it: the command dwords
// that carry it (CDW2, CDW3, CDW14, CDW15) and its length.
func kvKeyParam(t *testing.T, key string) string {
	t.Helper()
	var c nvme.Command
	if err := c.SetKVKey([]byte(key)); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%#x,%#x,%#x,%#x,%d", c.CDW2, c.CDW3, c.CDW14, c.CDW15, len(key))
}

// statusHex is a status as nvme-cli prints it: "(0x4187)" for Key Does
// Not Exist with DNR.
func statusHex(st nvme.Status) string { return fmt.Sprintf("%#x", uint16(st)) }

// hexVal decodes a hex INTEROP-VAL, padded with zeroes to n bytes.
func hexVal(t *testing.T, res interop.Result, name string, n int) []byte {
	t.Helper()
	b, err := hex.DecodeString(res.Values[name])
	if err != nil || len(b) == 0 || len(b) > n {
		t.Fatalf("%s = %q: %v", name, res.Values[name], err)
	}
	return append(b, make([]byte, n-len(b))...)
}

// jsonVal decodes a JSON INTEROP-VAL (nvme-cli's -o json, spaces removed).
func jsonVal(t *testing.T, res interop.Result, name string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(res.Values[name]), &m); err != nil {
		t.Fatalf("%s = %q: %v", name, res.Values[name], err)
	}
	return m
}

// TestLinuxHostKVNamespace: the Linux kernel's NVMe/TCP host and nvme-cli,
// in a QEMU guest, against a target with an NVM namespace (1) and a LEED
// Key Value namespace (2, CSI 01h). The kernel connects and uses namespace
// 1 (nvme list, nvme id-ns, O_DIRECT I/O checked by our host library);
// it takes namespace 2 for a namespace of a command set it has no block
// driver for and gives it only a character device, through which
// nvme-cli's io-passthru runs the KV commands against values our host
// library stores and reads. nvme-cli's Identify and log views of namespace
// 2 decode as the KV command set specifies. Both guest kernels: Debian 12's
// (6.1) and Debian 13's (6.12), whose namespace scans differ.
func TestLinuxHostKVNamespace(t *testing.T) {
	for _, k := range []interop.Kernel{interop.KernelDefault, interop.KernelTrixie} {
		t.Run(k.String(), func(t *testing.T) {
			interop.RequireKernel(t, k)
			linuxHostKVNamespace(t, k)
		})
	}
}

func linuxHostKVNamespace(t *testing.T, kernel interop.Kernel) {
	const nqn = "nqn.2026-11.io.nearstore:interop-kv"
	ctx := t.Context()
	nvm, err := volume.Open("mem:64MiB")
	if err != nil {
		t.Fatal(err)
	}
	defer nvm.Close()
	kvVol, err := volume.Open("mem:64MiB")
	if err != nil {
		t.Fatal(err)
	}
	defer kvVol.Close()
	store, err := leed.Open(ctx, kvVol, leed.Options{Create: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var ln *interop.ICRespRecorder
	srv := testtarget.Start(t, testtarget.Config{NQN: nqn, Name: "nvm", Volume: nvm,
		Namespaces: []target.NamespaceConfig{{Backend: kvVol, Name: "kv:mem", KV: &leed.Namespace{DB: store}}},
		Listen:     func(l net.Listener) net.Listener { ln = &interop.ICRespRecorder{Listener: l}; return ln }})
	defer srv.Stop()

	ctrl, kvns := testhost.Connect(t, srv.Addr(), nqn, 2, host.Options{})
	defer ctrl.Close() // before the target stops
	key1, key2, key3 := "interop-key-one", "guest-key-2", "no-such-key"
	val1 := make([]byte, 3000)
	rand.Read(val1)
	if err := kvns.Store(ctx, []byte(key1), val1, host.KVStoreOptions{}); err != nil {
		t.Fatal(err)
	}

	g, err := interop.Boot(ctx, interop.BootOptions{
		Scenario: "kv-host",
		Kernel:   kernel,
		Cmdline: map[string]string{
			"nqn": nqn, "target_port": fmt.Sprint(ln.Addr().(*net.TCPAddr).Port),
			"key1": kvKeyParam(t, key1), "val1_len": fmt.Sprint(len(val1)),
			"key2": kvKeyParam(t, key2), "key3": kvKeyParam(t, key3),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	res, err := g.Wait(ctx)
	for _, l := range res.Lines {
		if strings.HasPrefix(l, "INTEROP-DMESG") || strings.HasPrefix(l, "INTEROP-VAL") {
			t.Log(l)
		}
	}
	if err != nil {
		t.Fatalf("guest: %v\n%s", err, g.Tail(80))
	}
	t.Logf("guest passed in %s", res.Duration.Round(time.Second))

	// The kernel: namespace 1 a block device nvme-cli lists and
	// identifies, namespace 2 a character device only, no complaint
	// about either.
	if res.Values["list_ns1"] != "1" || res.Values["ns1_nsze"] != fmt.Sprintf("%#x", 64<<20/512) {
		t.Errorf("nvme list / id-ns of namespace 1: list_ns1=%q nsze=%q", res.Values["list_ns1"], res.Values["ns1_nsze"])
	}
	if !strings.HasPrefix(res.Values["kv_chardev"], "/dev/ng") {
		t.Errorf("namespace 2's character device: %q", res.Values["kv_chardev"])
	}
	for _, l := range res.Lines {
		if strings.HasPrefix(l, "INTEROP-DMESG") && (strings.Contains(l, "not reported") || strings.Contains(l, "failed") ||
			strings.Contains(strings.ToLower(l), "error")) {
			t.Errorf("kernel: %s", l)
		}
	}

	// nvme-cli's views of namespace 2.
	if x, st := res.Values["kv_idns_cns0_exit"], res.Values["kv_idns_cns0_status"]; x == "0" || st != statusHex(nvme.StatusInvalidIOCS|nvme.DNR) {
		t.Errorf("nvme id-ns (CNS 00h, the NVM structure) of the KV namespace: exit %s, status %s", x, st)
	}
	idkv, err := nvme.UnmarshalIdentifyNamespaceKV(hexVal(t, res, "kv_idns_hex", nvme.IdentifySize))
	if err != nil {
		t.Fatal(err)
	}
	mine, err := kvns.KVIdentify()
	if err != nil {
		t.Fatal(err)
	}
	if idkv.NSZE != uint64(kvVol.Size()) || idkv.MaxKey != nvme.KVMaxKey || idkv.MaxValue != uint32(store.Stats().MaxValueSize) ||
		idkv.NMIC != 1 || idkv.NGUID != mine.NGUID || idkv.NGUID == [16]byte{} {
		t.Errorf("KV Identify Namespace through admin-passthru: %+v (our host: %+v)", idkv, mine)
	}
	if m := jsonVal(t, res, "kv_indep_json"); fmt.Sprint(m["nstat"]) != "1" || fmt.Sprint(m["nmic"]) != "1" {
		t.Errorf("nvme cmdset-ind-id-ns: %v", m)
	}
	if d := res.Values["kv_descs_json"]; !strings.Contains(d, `"type":"csi","csi":"0x1"`) {
		t.Errorf("nvme ns-descs: %s", d)
	}
	// nvme-cli prints each non-zero combination vector: index 0, NVM and KV.
	if d := res.Values["iocs"]; !strings.Contains(d, "Combination[0]:3") || strings.Contains(d, "Combination[1]") {
		t.Errorf("nvme id-iocs: %s", d)
	}
	if kl, nl := res.Values["kv_list_ns"], res.Values["nvm_list_ns"]; !strings.Contains(kl, ":0x2") || strings.Contains(kl, ":0x1") ||
		!strings.Contains(nl, ":0x1") || strings.Contains(nl, ":0x2") {
		t.Errorf("nvme list-ns --csi=1: %q, --csi=0: %q", kl, nl)
	}
	var effects nvme.CommandEffectsLog
	if err := effects.Unmarshal(hexVal(t, res, "kv_effects_hex", 2048)); err != nil {
		t.Fatal(err)
	}
	for op, want := range map[uint8]uint32{
		nvme.KVStore: nvme.EffectCSUPP | nvme.EffectLBCC, nvme.KVRetrieve: nvme.EffectCSUPP, nvme.KVDelete: nvme.EffectCSUPP | nvme.EffectLBCC,
		nvme.KVExist: nvme.EffectCSUPP, nvme.KVList: nvme.EffectCSUPP, nvme.IOFlush: nvme.EffectCSUPP, nvme.IOWriteZeroes: 0,
	} {
		if effects.IOCS[op] != want {
			t.Errorf("effects log, CSI 01h, opcode %#x: %#x, want %#x", op, effects.IOCS[op], want)
		}
	}
	if effects.ACS[nvme.AdminIdentify] != nvme.EffectCSUPP {
		t.Errorf("effects log: Identify %#x", effects.ACS[nvme.AdminIdentify])
	}

	// The KV commands nvme-cli sent through the kernel.
	sum1 := md5.Sum(val1)
	if res.Values["kv_retrieve1_md5"] != hex.EncodeToString(sum1[:]) || res.Values["kv_retrieve1_result"] != fmt.Sprintf("0x%08x", len(val1)) {
		t.Errorf("guest's Retrieve of our value: md5 %s result %s, want %x and its length %d",
			res.Values["kv_retrieve1_md5"], res.Values["kv_retrieve1_result"], sum1, len(val1))
	}
	v2, err := kvns.Retrieve(ctx, []byte(key2))
	if err != nil {
		t.Fatalf("the guest's Store: %v", err)
	}
	if sum2 := md5.Sum(v2); hex.EncodeToString(sum2[:]) != res.Values["kv_store2_md5"] {
		t.Errorf("the guest stored md5 %s, our host reads %x (%d bytes)", res.Values["kv_store2_md5"], sum2, len(v2))
	}
	for v, want := range map[string]nvme.Status{
		"kv_exist_missing": nvme.StatusKVKeyNotExist, "kv_store2_again": nvme.StatusKVKeyExists, "kv_deleted_retrieve": nvme.StatusKVKeyNotExist,
	} {
		if x, st := res.Values[v+"_exit"], res.Values[v+"_status"]; x == "" || x == "0" || st != statusHex(want|nvme.DNR) {
			t.Errorf("%s: exit %q, status %q; want a failure with %s", v, x, st, statusHex(want|nvme.DNR))
		}
	}
	keys, err := nvme.UnmarshalKVList(hexVal(t, res, "kv_list_hex", 256))
	if err != nil || !bytes.Contains(bytes.Join(keys, []byte{0}), []byte(key2)) {
		t.Errorf("the guest's List: %q %v", keys, err)
	}
	var se *nvme.StatusError
	if _, err := kvns.Retrieve(ctx, []byte(key1)); !errors.As(err, &se) || se.Status.Code() != nvme.StatusKVKeyNotExist {
		t.Errorf("key the guest deleted: %v", err)
	}

	// Namespace 1's blocks the guest wrote.
	ns1, err := ctrl.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.MD5) != 2 {
		t.Fatalf("guest printed %d checksums, want 2", len(res.MD5))
	}
	for _, r := range res.MD5 {
		b := make([]byte, r.Length)
		if _, err := ns1.ReadAt(b, r.Offset); err != nil {
			t.Fatal(err)
		}
		if sum := md5.Sum(b); hex.EncodeToString(sum[:]) != r.MD5 {
			t.Errorf("bytes [%d, +%d): our host reads md5 %x, the Linux host wrote %s", r.Offset, r.Length, sum, r.MD5)
		}
	}
}

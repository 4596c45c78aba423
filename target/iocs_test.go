package target

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"sync"
	"testing"

	"github.com/nearstore/nearstore/kv/leed"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/volume"
)

// kvServer serves kvNamespaces: NVM namespace 1 and Key Value namespace
// 2, whose store and volume it returns.
func kvServer(t *testing.T) (string, *leed.Store, volume.Volume) {
	t.Helper()
	nss, closeAll, err := kvNamespaces()
	must(t, err)
	t.Cleanup(closeAll)
	_, addr := startServer(t, Config{Subsystems: []SubsystemConfig{{NQN: testNQN, Namespaces: nss}}})
	return addr, nss[1].KV.(*leed.Namespace).DB, nss[1].Backend.(volume.Volume)
}

// enabledAdmin brings up an admin queue enabled with CC.CSS = css.
func enabledAdmin(t *testing.T, addr string, css uint8) *rawHost {
	t.Helper()
	r := dialRaw(t, addr, 0)
	r.ok(r.connect(testNQN, 0, 31, 0xFFFF, 0))
	r.ok(r.property(true, nvme.PropCC, false, uint64(nvme.CCEnable|uint32(css)<<4|6<<16|4<<20)))
	return r
}

func identifyCmd(cns, csi uint8, nsid uint32) *nvme.Command {
	return &nvme.Command{Opcode: nvme.AdminIdentify, NSID: nsid, CDW10: uint32(cns), CDW11: uint32(csi) << 24}
}

func effectsCmd(csi uint8) *nvme.Command {
	var c nvme.Command
	(&nvme.GetLogPageCommand{LID: nvme.LogCmdEffects, Length: nvme.CommandEffectsLogSize, CSI: csi}).ToCommand(&c)
	c.NSID = 0xFFFFFFFF
	return &c
}

func TestIOCommandSetsCAPAndCC(t *testing.T) {
	addr, _, _ := kvServer(t)
	r := dialRaw(t, addr, 0)
	r.ok(r.connect(testNQN, 0, 31, 0xFFFF, 0))
	c := r.ok(r.property(false, nvme.PropCAP, true, 0))
	if capv := uint64(c.DW0) | uint64(c.DW1)<<32; capv&nvme.CAPCSSNVM == 0 || capv&nvme.CAPCSSIOCS == 0 {
		t.Fatalf("CAP %#x: CSS bits 0 and 6 not both set", capv)
	}
	for _, tc := range []struct {
		css   uint8
		ready bool
	}{
		{nvme.CCCSSNVM, true}, {nvme.CCCSSAllIOCS, true}, {nvme.CCCSSAdminOnly, false}, {0b001, false},
	} {
		r := enabledAdmin(t, addr, tc.css)
		csts := r.ok(r.property(false, nvme.PropCSTS, false, 0)).DW0
		if ready := csts&nvme.CSTSReady != 0 && csts&nvme.CSTSFatal == 0; ready != tc.ready {
			t.Errorf("CC.CSS %03b: CSTS %#x, want ready %v", tc.css, csts, tc.ready)
		}
	}
}

// TestIdentifyIOCommandSets checks every Identify CNS of the command sets
// against a controller enabled with all of them.
func TestIdentifyIOCommandSets(t *testing.T) {
	addr, st, kvVol := kvServer(t)
	a := enabledAdmin(t, addr, nvme.CCCSSAllIOCS)
	zeroes := make([]byte, nvme.IdentifySize)
	for _, tc := range []struct {
		name      string
		cmd       *nvme.Command
		st        nvme.Status
		check     func(t *testing.T, b []byte)
		wantZeros bool
	}{
		{name: "CNS 00h of the KV namespace: not the NVM structure", cmd: identifyCmd(nvme.CNSNamespace, 0, 2), st: nvme.StatusInvalidIOCS},
		{name: "CNS 00h of the NVM namespace", cmd: identifyCmd(nvme.CNSNamespace, 0, 1), check: func(t *testing.T, b []byte) {
			var id nvme.IdentifyNamespace
			must(t, id.Unmarshal(b))
			if id.NSZE != 16<<20/512 {
				t.Errorf("NSZE %d", id.NSZE)
			}
		}},
		{name: "CNS 05h CSI 01h: the KV structure", cmd: identifyCmd(nvme.CNSCSNamespace, nvme.CSIKV, 2), check: func(t *testing.T, b []byte) {
			id, err := nvme.UnmarshalIdentifyNamespaceKV(b)
			must(t, err)
			if id.NSZE != uint64(kvVol.Size()) || id.MaxKey != 16 || id.MaxValue != uint32(st.Stats().MaxValueSize) ||
				id.NMIC != 1 || id.RESCAP != 0 || id.NGUID == [16]byte{} || id.NUSE > id.NSZE {
				t.Errorf("%+v", id)
			}
			if b[25] != 0 {
				t.Errorf("NKVF %d, want 0 (one format, 0's based)", b[25])
			}
		}},
		{name: "CNS 05h CSI 00h of the KV namespace", cmd: identifyCmd(nvme.CNSCSNamespace, nvme.CSINVM, 2), st: nvme.StatusInvalidIOCS},
		{name: "CNS 05h CSI 01h of the NVM namespace", cmd: identifyCmd(nvme.CNSCSNamespace, nvme.CSIKV, 1), st: nvme.StatusInvalidIOCS},
		{name: "CNS 05h CSI 00h of the NVM namespace", cmd: identifyCmd(nvme.CNSCSNamespace, nvme.CSINVM, 1), wantZeros: true},
		{name: "CNS 05h of an inactive NSID", cmd: identifyCmd(nvme.CNSCSNamespace, nvme.CSIKV, 9), wantZeros: true},
		{name: "CNS 05h CSI 02h (zoned, not offered)", cmd: identifyCmd(nvme.CNSCSNamespace, 2, 1), st: nvme.StatusInvalidField},
		{name: "CNS 05h NSID 0", cmd: identifyCmd(nvme.CNSCSNamespace, nvme.CSIKV, 0), st: nvme.StatusInvalidNamespace},
		{name: "CNS 06h CSI 01h", cmd: identifyCmd(nvme.CNSCSController, nvme.CSIKV, 0), wantZeros: true},
		{name: "CNS 06h CSI 00h", cmd: identifyCmd(nvme.CNSCSController, nvme.CSINVM, 0), wantZeros: true},
		{name: "CNS 06h CSI 02h", cmd: identifyCmd(nvme.CNSCSController, 2, 0), st: nvme.StatusInvalidField},
		{name: "CNS 07h CSI 01h", cmd: identifyCmd(nvme.CNSCSActiveNSList, nvme.CSIKV, 0), check: nsList(2)},
		{name: "CNS 07h CSI 00h", cmd: identifyCmd(nvme.CNSCSActiveNSList, nvme.CSINVM, 0), check: nsList(1)},
		{name: "CNS 07h CSI 00h above NSID 1", cmd: identifyCmd(nvme.CNSCSActiveNSList, nvme.CSINVM, 1), check: nsList()},
		{name: "CNS 07h CSI 02h", cmd: identifyCmd(nvme.CNSCSActiveNSList, 2, 0), st: nvme.StatusInvalidField},
		{name: "CNS 02h", cmd: identifyCmd(nvme.CNSActiveNSList, 0, 0), check: nsList(1, 2)},
		{name: "CNS 08h of the KV namespace", cmd: identifyCmd(nvme.CNSCSIndependentNS, 0, 2), check: independent(0)},
		{name: "CNS 08h of the NVM namespace", cmd: identifyCmd(nvme.CNSCSIndependentNS, 0, 1), check: independent(nvmRescap)},
		{name: "CNS 08h of an inactive NSID", cmd: identifyCmd(nvme.CNSCSIndependentNS, 0, 9), wantZeros: true},
		{name: "CNS 08h NSID FFFFFFFFh", cmd: identifyCmd(nvme.CNSCSIndependentNS, 0, 0xFFFFFFFF), st: nvme.StatusInvalidNamespace},
		{name: "CNS 03h of the KV namespace, CSI field ignored", cmd: identifyCmd(nvme.CNSNSDescriptors, 7, 2), check: func(t *testing.T, b []byte) {
			ds, err := nvme.UnmarshalNSDescriptors(b)
			must(t, err)
			if len(ds) != 3 || ds[2].Type != nvme.NIDTCSI || !bytes.Equal(ds[2].ID, []byte{nvme.CSIKV}) {
				t.Errorf("descriptors %+v", ds)
			}
		}},
		{name: "CNS 1Ch", cmd: identifyCmd(nvme.CNSIOCommandSets, 0, 0), check: func(t *testing.T, b []byte) {
			vs, err := nvme.UnmarshalIOCSVectors(b)
			must(t, err)
			if len(vs) != 1 || vs[0] != 1<<nvme.CSINVM|1<<nvme.CSIKV {
				t.Errorf("vectors %v", vs)
			}
		}},
		{name: "CNS 01h: the effects log is offered", cmd: identifyCmd(nvme.CNSController, 0, 0), check: func(t *testing.T, b []byte) {
			var id nvme.IdentifyController
			must(t, id.Unmarshal(b))
			if id.LPA&(1<<1) == 0 {
				t.Errorf("LPA %#x", id.LPA)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := make([]byte, nvme.IdentifySize)
			c := a.exec(tc.cmd, nil, in, false)
			if c.Status.Code() != tc.st.Code() || (tc.st != 0 && !c.Status.DoNotRetry()) {
				t.Fatalf("status %v, want %v with DNR", c.Status, tc.st)
			}
			if tc.wantZeros && !bytes.Equal(in, zeroes) {
				t.Errorf("not zeroes: % x", in[:32])
			}
			if tc.check != nil {
				tc.check(t, in)
			}
		})
	}
}

func nsList(want ...uint32) func(t *testing.T, b []byte) {
	return func(t *testing.T, b []byte) {
		t.Helper()
		var got []uint32
		for off := 0; off < len(b); off += 4 {
			if id := binary.LittleEndian.Uint32(b[off:]); id != 0 {
				got = append(got, id)
			}
		}
		if len(got) != len(want) || (len(want) > 0 && !equalIDs(got, want)) {
			t.Errorf("NSIDs %v, want %v", got, want)
		}
	}
}

func equalIDs(a, b []uint32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func independent(rescap uint8) func(t *testing.T, b []byte) {
	return func(t *testing.T, b []byte) {
		t.Helper()
		var id nvme.IdentifyNamespaceIndependent
		must(t, id.Unmarshal(b))
		if id != (nvme.IdentifyNamespaceIndependent{NMIC: 1, RESCAP: rescap, NSTAT: nvme.NSTATReady}) {
			t.Errorf("%+v", id)
		}
	}
}

// TestCommandSetsEnabled: what CC.CSS enables decides what a KV
// namespace's I/O queue runs and what its effects log lists; the I/O
// Command Set Profile offers only combination 0.
func TestCommandSetsEnabled(t *testing.T) {
	addr, _, _ := kvServer(t)
	key := &nvme.Command{Opcode: nvme.KVStore, NSID: 2, CDW10: 5}
	must(t, key.SetKVKey([]byte("k1")))
	exist := &nvme.Command{Opcode: nvme.KVExist, NSID: 2}
	must(t, exist.SetKVKey([]byte("k1")))
	for _, tc := range []struct {
		name      string
		css       uint8
		kvRuns    bool
		kvEffects uint32 // Store's entry in the KV page
	}{
		{"CC.CSS 110b: every command set", nvme.CCCSSAllIOCS, true, nvme.EffectCSUPP | nvme.EffectLBCC},
		{"CC.CSS 000b: NVM only", nvme.CCCSSNVM, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := enabledAdmin(t, addr, tc.css)
			a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminSetFeatures, CDW10: nvme.FeatNumQueues, CDW11: 0}, nil, nil, false))
			q := ioQueue(t, addr, a, 1, 0)
			k := *key
			c := q.exec(&k, []byte("value"), nil, true)
			x := *exist
			cx := q.exec(&x, nil, nil, false)
			if tc.kvRuns {
				q.ok(c)
				q.ok(cx)
			} else if c.Status.Code() != nvme.StatusInvalidOpcode || cx.Status.Code() != nvme.StatusInvalidOpcode {
				t.Errorf("KV Store %v, Exist %v; want Invalid Opcode", c.Status, cx.Status)
			}
			// The NVM namespace works either way.
			q.ok(q.exec(rw(nvme.IOWrite, 1, 0, 1), pattern(512, 3), nil, true))

			page := make([]byte, nvme.CommandEffectsLogSize)
			var kv, nvm nvme.CommandEffectsLog
			a.ok(a.exec(effectsCmd(nvme.CSIKV), nil, page, false))
			must(t, kv.Unmarshal(page))
			a.ok(a.exec(effectsCmd(nvme.CSINVM), nil, page, false))
			must(t, nvm.Unmarshal(page))
			if kv.IOCS[nvme.KVStore] != tc.kvEffects || nvm.IOCS[nvme.IOWrite] != nvme.EffectCSUPP|nvme.EffectLBCC ||
				nvm.IOCS[nvme.IORead] != nvme.EffectCSUPP || kv.ACS[nvme.AdminIdentify] != nvme.EffectCSUPP || nvm.IOCS[0x7e] != 0 {
				t.Errorf("effects: KV Store %#x, NVM Write %#x Read %#x, Identify %#x", kv.IOCS[nvme.KVStore], nvm.IOCS[nvme.IOWrite],
					nvm.IOCS[nvme.IORead], kv.ACS[nvme.AdminIdentify])
			}
			if tc.kvRuns && (kv.IOCS[nvme.KVRetrieve] != nvme.EffectCSUPP || kv.IOCS[nvme.KVDelete] != nvme.EffectCSUPP|nvme.EffectLBCC || kv.IOCS[nvme.IOWriteZeroes] != 0) {
				t.Errorf("KV page: Retrieve %#x Delete %#x Write Zeroes %#x", kv.IOCS[nvme.KVRetrieve], kv.IOCS[nvme.KVDelete], kv.IOCS[nvme.IOWriteZeroes])
			}
			if c := a.exec(effectsCmd(2), nil, page, false); c.Status.Code() != nvme.StatusInvalidField {
				t.Errorf("effects log of CSI 02h: %v", c.Status)
			}

			if c := a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminGetFeatures, CDW10: nvme.FeatIOCSProfile}, nil, nil, false)); c.DW0 != 0 {
				t.Errorf("I/O Command Set Profile %d", c.DW0)
			}
			a.ok(a.exec(&nvme.Command{Opcode: nvme.AdminSetFeatures, CDW10: nvme.FeatIOCSProfile, CDW11: 0}, nil, nil, false))
			if c := a.exec(&nvme.Command{Opcode: nvme.AdminSetFeatures, CDW10: nvme.FeatIOCSProfile, CDW11: 1}, nil, nil, false); c.Status.Code() != nvme.StatusIOCSCombinationRejected || !c.Status.DoNotRetry() {
				t.Errorf("combination 1: %v", c.Status)
			}
		})
	}
}

// TestDiscoveryCommandSets: the discovery controller takes CC.CSS 110b
// (Linux writes it when CAP offers it) and offers no effects log.
func TestDiscoveryCommandSets(t *testing.T) {
	_, addr := startServer(t, Config{})
	r := dialRaw(t, addr, 0)
	r.ok(r.connect(nvme.DiscoveryNQN, 0, 31, 0xFFFF, 0))
	r.ok(r.property(true, nvme.PropCC, false, nvme.CCEnable|nvme.CCCSSAllIOCS<<4))
	if csts := r.ok(r.property(false, nvme.PropCSTS, false, 0)).DW0; csts != nvme.CSTSReady {
		t.Fatalf("CSTS %#x", csts)
	}
	in := make([]byte, nvme.IdentifySize)
	r.ok(r.exec(identifyCmd(nvme.CNSController, 0, 0), nil, in, false))
	var id nvme.IdentifyController
	must(t, id.Unmarshal(in))
	if id.LPA&(1<<1) != 0 {
		t.Errorf("discovery controller LPA %#x offers the effects log", id.LPA)
	}
	if c := r.exec(effectsCmd(nvme.CSINVM), nil, make([]byte, nvme.CommandEffectsLogSize), false); c.Status.OK() {
		t.Error("discovery controller returned an effects log")
	}
}

// FuzzIOCSAdmin runs host-chosen Identify, Get Log Page and Get/Set
// Features commands (the fields the I/O command set handlers decode: CNS,
// CSI, NSID, LID, FID, lengths) through the controller layer of a
// controller enabled with every command set, over an NVM and a KV
// namespace: none may panic, none may return more data than the host's
// SGL asked for, and every refusal says not to retry.
func FuzzIOCSAdmin(f *testing.F) {
	for _, s := range []struct {
		op                 uint8
		nsid, cdw10, cdw11 uint32
		cdw14, length      uint32
	}{
		{0, 2, nvme.CNSCSNamespace, nvme.CSIKV << 24, 0, 4096},
		{0, 2, nvme.CNSNamespace, 0, 0, 4096},
		{0, 0, nvme.CNSIOCommandSets, 0, 0, 4096},
		{0, 1, nvme.CNSCSIndependentNS, 0, 0, 100},
		{0, 0, nvme.CNSCSActiveNSList, nvme.CSIKV << 24, 0, 4096},
		{1, 0xFFFFFFFF, nvme.LogCmdEffects | 1023<<16, 0, nvme.CSIKV << 24, 4096},
		{2, 0, nvme.FeatIOCSProfile, 5, 0, 0},
		{3, 0, nvme.FeatIOCSProfile, 0, 0, 0},
	} {
		f.Add(s.op, s.nsid, s.cdw10, s.cdw11, s.cdw14, s.length)
	}
	srv := kvTestServer(f)
	var (
		once sync.Once
		mu   sync.Mutex
		sess = newTestSession(srv)
	)
	f.Fuzz(func(t *testing.T, op uint8, nsid, cdw10, cdw11, cdw14, length uint32) {
		once.Do(func() { bindCSS(t, sess, nvme.CCCSSAllIOCS) })
		mu.Lock()
		defer mu.Unlock()
		opcodes := []uint8{nvme.AdminIdentify, nvme.AdminGetLogPage, nvme.AdminSetFeatures, nvme.AdminGetFeatures}
		c := cmd(opcodes[int(op)%len(opcodes)], nsid, int(length%(1<<20)))
		c.CDW10, c.CDW11, c.CDW14 = cdw10, cdw11, cdw14
		var data []byte
		if c.Opcode == nvme.AdminSetFeatures && uint8(cdw10) == nvme.FeatTimestamp {
			data = make([]byte, 8)
		}
		got, _ := run(t, sess, c, data)
		if got.status.OK() && len(got.data) > int(c.DPTR.Length) {
			t.Fatalf("%d bytes returned for an SGL of %d", len(got.data), c.DPTR.Length)
		}
		if !got.status.OK() && !got.status.DoNotRetry() && got.status.Code() != nvme.StatusAbortRequested {
			t.Fatalf("refusal %v without DNR", got.status)
		}
	})
}

// kvTestServer is kvServer's subsystem without a listener, for the
// controller layer.
func kvTestServer(t testing.TB) *Server {
	t.Helper()
	nss, closeAll, err := kvNamespaces()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	srv, err := New(Config{Subsystems: []SubsystemConfig{{NQN: testNQN, Namespaces: nss}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// kvNamespaces opens an NVM namespace (16 MiB) and a LEED Key Value
// namespace (32 MiB) on memory volumes, and what closes them.
func kvNamespaces() ([]NamespaceConfig, func(), error) {
	nvm, err := volume.Open("mem:16MiB")
	if err != nil {
		return nil, nil, err
	}
	kvVol, err := volume.Open("mem:32MiB")
	if err != nil {
		nvm.Close()
		return nil, nil, err
	}
	st, err := leed.Open(context.Background(), kvVol, leed.Options{Create: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		nvm.Close()
		kvVol.Close()
		return nil, nil, err
	}
	closeAll := func() {
		st.Close()
		kvVol.Close()
		nvm.Close()
	}
	return []NamespaceConfig{{Backend: nvm, Name: "nvm"}, {Backend: kvVol, Name: "kv", KV: &leed.Namespace{DB: st}}}, closeAll, nil
}

// bindCSS connects s as a new controller's admin queue and enables it
// with CC.CSS = css.
func bindCSS(t *testing.T, s *session, css uint8) {
	t.Helper()
	var c nvme.Command
	(&nvme.ConnectCommand{SQSize: 31}).ToCommand(&c)
	c.Flags |= nvme.PSDTSGL
	if got, _ := run(t, s, c, (&nvme.ConnectData{CNTLID: 0xFFFF, SubNQN: testNQN, HostNQN: "fuzz"}).Marshal()); !got.status.OK() {
		t.Fatalf("connect: %v", got.status)
	}
	(&nvme.PropertyCommand{Offset: nvme.PropCC, Value: uint64(nvme.CCEnable | uint32(css)<<4 | 6<<16 | 4<<20)}).ToCommand(&c, true)
	if got, _ := run(t, s, c, nil); !got.status.OK() {
		t.Fatalf("enable: %v", got.status)
	}
}

package interop

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// Unit tests of the harness itself; no QEMU, so they run with -short too.

func TestParseResult(t *testing.T) {
	log := []string{
		"[    1.0] boot noise",
		"INTEROP-VAL dev_size=67108864",
		"INTEROP-MD5 0 4194304 2320c4d7f628d814a2f15cad5bc8f625",
		"[   16.1] nvme0c0n1: some kernel line INTEROP-MD5 66060288 1048576 3e253e863fbdfa040ef8dc1dabe1c736\r",
		"INTEROP-MD5 0 10 not-an-md5",
		"INTEROP-MARKER 66584576 4096 3afd438d4e5c75697ae8c22eba4ec15b NSIOP-MARKER-66584576-",
		"INTEROP-RESULT: PASS",
	}
	r := parseResult(log)
	if !r.Passed || r.Reason != "" {
		t.Fatalf("Passed=%v Reason=%q", r.Passed, r.Reason)
	}
	if r.Values["dev_size"] != "67108864" {
		t.Errorf("Values = %v", r.Values)
	}
	if len(r.MD5) != 2 {
		t.Fatalf("MD5 = %v", r.MD5)
	}
	if s, ok := r.MD5Of(66060288, 1048576); !ok || s != "3e253e863fbdfa040ef8dc1dabe1c736" {
		t.Errorf("MD5Of = %q %v", s, ok)
	}
	if len(r.Markers) != 1 || r.Markers[0].Offset != 66584576 || r.Markers[0].Text != "NSIOP-MARKER-66584576-" {
		t.Errorf("Markers = %+v", r.Markers)
	}
	b := r.Markers[0].Bytes()
	if len(b) != 4096 || !bytes.HasPrefix(b, []byte("NSIOP-MARKER-66584576-NSIOP")) {
		t.Errorf("Marker.Bytes() = %d bytes %q...", len(b), b[:40])
	}

	f := parseResult([]string{"INTEROP-RESULT: PASS", "INTEROP-RESULT: FAIL e2fsck -fn exit 4"})
	if f.Passed || f.Reason != "e2fsck -fn exit 4" {
		t.Errorf("FAIL not parsed: %+v", f)
	}
}

func TestICReqAndICResp(t *testing.T) {
	req := ICReq()
	if len(req) != 128 || req[0] != 0x00 || req[2] != 128 || binary.LittleEndian.Uint32(req[4:]) != 128 {
		t.Fatalf("ICReq = % x", req[:16])
	}
	if !bytes.Equal(req[8:], make([]byte, 120)) {
		t.Errorf("ICReq PSH not all zero: % x", req[8:24])
	}

	resp := make([]byte, 128)
	resp[0], resp[2] = 0x01, 128
	binary.LittleEndian.PutUint32(resp[4:], 128)
	resp[11] = 0x3
	binary.LittleEndian.PutUint32(resp[12:], 131072)
	r, err := ParseICResp(resp)
	if err != nil || !r.HeaderDigest || !r.DataDigest || r.MaxH2CData != 131072 {
		t.Fatalf("ParseICResp = %+v, %v", r, err)
	}
	resp[0] = 0x04
	if _, err := ParseICResp(resp); err == nil || !strings.Contains(err.Error(), "PDU type") {
		t.Errorf("bad type accepted: %v", err)
	}
}

func TestKernelCmdline(t *testing.T) {
	s, err := kernelCmdline(BootOptions{Scenario: "host-to-ours", Cmdline: map[string]string{"nqn": "nqn.x:y", "target_port": "4420"}})
	if err != nil || s != "console=ttyS0 panic=-1 scenario=host-to-ours nqn=nqn.x:y target_port=4420" {
		t.Errorf("kernelCmdline = %q, %v", s, err)
	}
	if _, err := kernelCmdline(BootOptions{Scenario: "x", Cmdline: map[string]string{"a": "b c"}}); err == nil {
		t.Error("space in a value accepted")
	}
}

func TestPrepareKernelUnknown(t *testing.T) {
	if _, err := PrepareKernel("no-such-suite"); err == nil || !strings.Contains(err.Error(), "unknown kernel") {
		t.Errorf("PrepareKernel(no-such-suite) = %v", err)
	}
	if KernelDefault.String() != "default" || KernelTrixie.String() != "trixie" {
		t.Errorf("String: %q %q", KernelDefault, KernelTrixie)
	}
}

func TestBootFault(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lines   []string
		fault   string
		started bool
	}{
		{"booting", []string{"[    0.1] Linux version 6.12", "[    1.2] virtio_net"}, "", false},
		{"started", []string{"[    1.2] virtio_net", "INTEROP-START: host-to-ours at 7.26s"}, "", true},
		{"oops before start", []string{"[    2.0] Oops: general protection fault, probably for non-canonical address", "[    2.0] RIP: 0010:x"},
			"[    2.0] Oops: general protection fault, probably for non-canonical address", false},
		{"panic before start", []string{"[    3.1] Kernel panic - not syncing: Attempted to kill init!"}, "[    3.1] Kernel panic - not syncing: Attempted to kill init!", false},
		{"BUG before start", []string{"[    1.0] BUG: kernel NULL pointer dereference, address: 0000000000000008"}, "[    1.0] BUG: kernel NULL pointer dereference, address: 0000000000000008", false},
		{"fault after start is the scenario's", []string{"INTEROP-START: x at 7s", "[   9.0] BUG: unable to handle page fault"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fault, started := bootFault(tc.lines)
			if fault != tc.fault || started != tc.started {
				t.Errorf("bootFault = %q, %v; want %q, %v", fault, started, tc.fault, tc.started)
			}
		})
	}
}

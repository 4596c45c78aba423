package target

import (
	"testing"

	"github.com/nearstore/nearstore/nvme"
)

// Regression tests for issue 18's resource findings, against a real
// server over TCP. They assert on the target's own account of the command
// buffers hosts hold (bufPool.inUse and peak), never on timing.

// discoveryQueue brings up an enabled admin queue on the discovery
// controller.
func discoveryQueue(t *testing.T, addr string) *rawHost {
	r := dialRaw(t, addr, 0)
	r.ok(r.connect(nvme.DiscoveryNQN, 0, 31, 0xFFFF, 0))
	r.ok(r.property(true, nvme.PropCC, false, nvme.CCEnable))
	return r
}

// TestGetLogPageAllocationBounded: a Get Log Page whose NUMD asks for
// 16 GiB used to allocate all of it before its SGL trimmed the result.
// Now the lengths must agree and stay within MDTS, and nothing is
// allocated for a command that fails the check; the queue and a
// well-behaved command on it go on working.
func TestGetLogPageAllocationBounded(t *testing.T) {
	s, addr := startServer(t, Config{})
	for _, tc := range []struct {
		name  string
		queue func() *rawHost
		lid   uint8
	}{
		{"discovery", func() *rawHost { return discoveryQueue(t, addr) }, nvme.LogDiscovery},
		{"nvm", func() *rawHost { return adminQueue(t, addr, testNQN) }, nvme.LogSMART},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.queue()
			for _, c := range []struct {
				numdBytes int
				sgl       uint32
				want      nvme.Status
			}{
				{16 << 30, 4096, nvme.StatusInvalidField | nvme.DNR},         // NUMD all ones
				{16 << 30, 1 << 30, nvme.StatusSGLDataLenInvalid | nvme.DNR}, // SGL past MDTS too
				{4096, 8192, nvme.StatusSGLDataLenInvalid | nvme.DNR},        // lengths disagree
				{8192, 4096, nvme.StatusSGLDataLenInvalid | nvme.DNR},
				{1 << 20, 1 << 20, nvme.StatusSGLDataLenInvalid | nvme.DNR}, // both past MDTS
			} {
				var cmd nvme.Command
				(&nvme.GetLogPageCommand{LID: tc.lid, Length: c.numdBytes}).ToCommand(&cmd)
				cmd.DPTR = nvme.SGL{Length: c.sgl, Type: nvme.SGLTransportDataBlock}
				got := r.exec(&cmd, nil, nil, false)
				if got.Status != c.want {
					t.Errorf("NUMD %d bytes, SGL %d: status %v, want %v", c.numdBytes, c.sgl, got.Status, c.want)
				}
			}
			if pk := s.bufs.peak.Load(); pk > 1<<20 {
				t.Fatalf("the target held %d bytes of command buffers at its peak", pk)
			}
			// The queue still works, with lengths that agree.
			in := make([]byte, 512)
			var cmd nvme.Command
			(&nvme.GetLogPageCommand{LID: tc.lid, Length: len(in)}).ToCommand(&cmd)
			r.ok(r.exec(&cmd, nil, in, false))
		})
	}
	if n := s.bufs.inUse.Load(); n != 0 {
		t.Fatalf("%d bytes of command buffers still held", n)
	}
}

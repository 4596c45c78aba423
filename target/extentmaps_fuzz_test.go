package target

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
)

// FuzzAdminPayloads sends arbitrary payloads as Extent Map Put, Extent Map
// Query and Grant Put data, and arbitrary IDs to Grant Release, to one
// running target over TCP. Every command must complete, with success or
// one of the statuses docs/PROTOCOL.md gives these commands, and the
// target must go on answering.
func FuzzAdminPayloads(f *testing.F) {
	_, addr := startServer(f, Config{
		// Small limits, so that the fuzzer reaches them.
		MaxExtentMaps: 64, MaxExtentMapExtents: 256, MaxGrants: 8,
	}, "mem:1MiB")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := host.Connect(ctx, addr, testNQN, host.Options{HostNQN: "nqn.fuzz-owner", KeepAlive: -1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })
	ns, err := c.Namespace(1)
	if err != nil {
		f.Fatal(err)
	}
	holdReservation(f, ns) // only the holder grants

	f.Add(uint8(0), pushdown.MarshalMapUpdates([]pushdown.MapUpdate{put(1, 1, 512, x(0, 1)), remove(2, 3)}))
	f.Add(uint8(1), []byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(2), (&pushdown.Grant{ID: 1, Host: "nqn.fuzz-task", Mode: pushdown.GrantRead, Lease: time.Second, Extents: []pushdown.Extent{x(0, 8)}}).Marshal())
	f.Add(uint8(3), []byte{1, 0, 0, 0, 0, 0, 0, 0})
	allowed := map[uint8][]nvme.Status{
		0: {nvme.StatusBadExtentMap, nvme.StatusSGLDataLenInvalid, nvme.StatusMetadataLimit},
		1: {nvme.StatusBadExtentMap},
		2: {nvme.StatusBadExtentMap, nvme.StatusSGLDataLenInvalid, nvme.StatusMetadataLimit},
		3: {},
	}
	f.Fuzz(func(t *testing.T, op uint8, payload []byte) {
		op %= 4
		cmd := nvme.Command{NSID: 1}
		var in []byte
		switch op {
		case 0:
			cmd.Opcode = nvme.AdminExtentMapPut
		case 1:
			cmd.Opcode = nvme.AdminExtentMapQuery
			if len(payload) == 0 || len(payload) > adminInCapsuleData {
				return // the host library refuses these itself
			}
			in = make([]byte, queryResultHeader+queryEntrySize*(len(payload)/8+1))
		case 2:
			cmd.Opcode = nvme.AdminGrantPut
		case 3:
			cmd.Opcode = nvme.AdminGrantRelease
			for i, b := range payload[:min(8, len(payload))] {
				if i < 4 {
					cmd.CDW10 |= uint32(b) << (8 * i)
				} else {
					cmd.CDW11 |= uint32(b) << (8 * (i - 4))
				}
			}
			payload = nil
		}
		if len(payload) == 0 {
			payload = nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.Admin(ctx, &cmd, payload, in)
		if err != nil {
			ok := false
			for _, st := range allowed[op] {
				ok = ok || errors.Is(err, &nvme.StatusError{Status: st})
			}
			if !ok {
				t.Fatalf("op %d with %d bytes: %v", op, len(payload), err)
			}
		}
		if _, err := ns.ExtentMapVersions(ctx, []uint64{1}); err != nil {
			t.Fatalf("the target stopped answering: %v", err)
		}
	})
}

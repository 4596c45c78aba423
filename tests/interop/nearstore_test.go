package interop_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/internal/testtarget"
	"github.com/nearstore/nearstore/iocheck"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/tests/interop"
	"github.com/nearstore/nearstore/volume"
)

// TestLinuxHostToOurTarget: the Linux kernel's NVMe/TCP host, in a QEMU
// guest, discovers and connects to nearstore's target, writes and reads
// back checksummed data, makes ext4, mounts it, writes files, unmounts and
// fscks clean. Then nearstore's own host library reads the same blocks and
// must agree with every checksum and marker the guest printed.
func TestLinuxHostToOurTarget(t *testing.T) {
	interop.Require(t)
	const nqn = "nqn.2026-11.io.nearstore:interop-ours"
	vol, err := volume.Open("mem:64MiB")
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	var ln *interop.ICRespRecorder
	srv := testtarget.Start(t, testtarget.Config{NQN: nqn, Name: "interop", Volume: vol,
		Listen: func(l net.Listener) net.Listener { ln = &interop.ICRespRecorder{Listener: l}; return ln }})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	ctx := t.Context()
	g, err := interop.Boot(ctx, interop.BootOptions{
		Scenario: "host-to-ours",
		Cmdline:  map[string]string{"nqn": nqn, "target_port": fmt.Sprint(port), "resv": "1", "digests": "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	res, err := g.Wait(ctx)
	if err != nil {
		t.Fatalf("guest: %v\n%s", err, g.Tail(80))
	}
	if len(res.MD5) == 0 || len(res.Markers) == 0 {
		t.Fatalf("guest printed no checksums or markers: %v", res.Lines)
	}
	t.Logf("guest passed in %s: %d checksummed regions, %d markers", res.Duration.Round(time.Second), len(res.MD5), len(res.Markers))
	// The kernel's second connect asked for both digests, and the target
	// granted them on its admin queue and at least one I/O queue.
	both := 0
	for _, r := range ln.Resps() {
		if r.HeaderDigest && r.DataDigest {
			both++
		}
	}
	if both < 2 {
		t.Errorf("%d of %d connections negotiated header and data digests; the digest connect should have made at least 2", both, len(ln.Resps()))
	}

	// nearstore's host reads the same blocks over NVMe/TCP.
	ctrl, ns := testhost.Connect(t, ln.Addr().String(), nqn, 1, host.Options{})
	defer ctrl.Close()
	for _, r := range res.MD5 {
		b := make([]byte, r.Length)
		if _, err := ns.ReadAt(b, r.Offset); err != nil {
			t.Fatalf("read %d bytes at %d: %v", r.Length, r.Offset, err)
		}
		if sum := md5.Sum(b); hex.EncodeToString(sum[:]) != r.MD5 {
			t.Errorf("bytes [%d, +%d): our host reads md5 %x, the Linux host saw %s", r.Offset, r.Length, sum, r.MD5)
		}
	}
	for _, m := range res.Markers {
		b := make([]byte, m.Length)
		if _, err := ns.ReadAt(b, m.Offset); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, m.Bytes()) {
			t.Errorf("marker at %d differs", m.Offset)
		}
	}
	// The guest left a Write Exclusive reservation made with nvme-cli
	// (resv=1): our host sees it, may read but not write.
	rs, err := ns.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := rs.Holder(); rs.Type != nvme.ResvWriteExclusive || rs.NumRegistrants != 1 || !ok || h.Key != 41394 {
		t.Fatalf("reservation the guest left: %+v", rs)
	}
	if _, err := ns.WriteAt(make([]byte, 4096), 0); !errors.Is(err, host.ErrReservationConflict) {
		t.Fatalf("write under the guest's reservation: %v", err)
	}
}

// TestOurHostToLinuxTarget: nearstore's host library connects to the Linux
// kernel's NVMe/TCP target (nvmet-tcp, a file-backed namespace) in a QEMU
// guest and passes io verify; the guest's own checksum of its backing file
// then agrees with what our host wrote.
func TestOurHostToLinuxTarget(t *testing.T) {
	interop.Require(t)
	const nqn = "nqn.2026-11.io.nearstore:interop-linux"
	ctx := t.Context()
	g, err := interop.Boot(ctx, interop.BootOptions{
		Scenario: "ours-to-linux",
		Cmdline:  map[string]string{"nqn": nqn, "ns_size_mb": "64"},
		HostFwd:  map[int]int{interop.GuestNVMePort: 0, interop.GuestControlPort: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	if _, err := g.WaitFor(ctx, "INTEROP-READY"); err != nil {
		t.Fatalf("guest target: %v\n%s", err, g.Tail(60))
	}
	addr := g.HostAddr(interop.GuestNVMePort)

	entries, err := host.Discover(ctx, addr, host.Options{})
	if err != nil {
		t.Fatalf("discover: %v", err)
	}
	found := false
	for _, e := range entries {
		found = found || e.SubNQN == nqn
	}
	if !found {
		t.Fatalf("Linux discovery log does not list %s: %+v", nqn, entries)
	}

	for _, digests := range []bool{false, true} {
		t.Run(fmt.Sprintf("digests=%v", digests), func(t *testing.T) {
			ctrl, err := host.Connect(ctx, addr, nqn, host.Options{IOQueues: 2, HeaderDigest: digests, DataDigest: digests})
			if err != nil {
				t.Fatal(err)
			}
			defer ctrl.Close()
			if h, d := ctrl.Digests(); h != digests || d != digests {
				t.Fatalf("the Linux target negotiated header digest %v, data digest %v; asked for %v", h, d, digests)
			}
			ns, err := ctrl.Namespace(1)
			if err != nil {
				t.Fatal(err)
			}
			if ns.Size() != 64<<20 {
				t.Fatalf("namespace is %d bytes, want 64 MiB", ns.Size())
			}
			// TCG and user-net move a few MB/s: verify 8 MiB.
			rep := iocheck.Run(ctx, ns, iocheck.Options{Size: 8 << 20})
			for _, s := range rep.Steps {
				if s.Err != "" {
					t.Errorf("%s: %s", s.Name, s.Err)
				}
			}
			if !rep.OK {
				t.FailNow()
			}
			// What we wrote is what the Linux target stored.
			b := make([]byte, 1<<20)
			if _, err := ns.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			sum := md5.Sum(b)
			out, err := g.Control(ctx, "md5 0 1048576")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, hex.EncodeToString(sum[:])) {
				t.Fatalf("guest's backing file md5 %q, our host read %x", out, sum)
			}
		})
	}
	if _, err := g.Control(ctx, "stop"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Wait(ctx); err != nil {
		t.Fatalf("guest: %v", err)
	}
}

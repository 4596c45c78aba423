package interop

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// These tests prove the harness with Linux on both ends; they need QEMU and
// are skipped with -short (see Require). The nearstore tests go beside them:
// TestLinuxHostToOurTarget (scenario host-to-ours) and
// TestOurHostToLinuxTarget (scenario ours-to-linux).

// TestLinuxSelftest boots the linux-selftest scenario: nvmet-tcp and the
// kernel NVMe/TCP host in one guest, over its loopback, with raw O_DIRECT
// I/O, ext4 (mkfs, mount, files, umount, e2fsck -fn) and a backing-file
// comparison.
func TestLinuxSelftest(t *testing.T) {
	Require(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	const nqn = "nqn.2024-01.io.nearstore:selftest"
	res := Run(ctx, t, "guest", BootOptions{
		Scenario: "linux-selftest",
		Cmdline:  map[string]string{"nqn": nqn, "ns_size_mb": "64"},
	})

	size, err := strconv.ParseInt(res.Values["dev_size"], 10, 64)
	if err != nil || size != 64<<20 {
		t.Errorf("dev_size = %q, want %d", res.Values["dev_size"], 64<<20)
	}
	if _, ok := res.MD5Of(0, 4<<20); !ok {
		t.Errorf("no INTEROP-MD5 for the first 4 MiB; got %v", res.MD5)
	}
	if _, ok := res.MD5Of(0, size); !ok {
		t.Errorf("no INTEROP-MD5 for the whole namespace; got %v", res.MD5)
	}
	if len(res.Markers) != 1 {
		t.Fatalf("markers = %v, want 1", res.Markers)
	}
	m := res.Markers[0]
	sum := md5.Sum(m.Bytes())
	if got := hex.EncodeToString(sum[:]); got != m.MD5 {
		t.Errorf("marker %q: md5 of Marker.Bytes() = %s, guest printed %s", m.Text, got, m.MD5)
	}
}

// TestLinuxTargetOverHostFwd boots the ours-to-linux scenario (the guest's
// nvmet-tcp, reached from this machine through a QEMU hostfwd port) and
//   - sends it a hand-made ICReq from Go and checks the ICResp;
//   - uses the control port (ping, md5 of the still-empty backing file);
//   - boots a second guest running host-to-ours against it via this
//     machine's loopback (guest B → 10.0.2.2:PORT → hostfwd → guest A), the
//     same path TestLinuxHostToOurTarget takes to nearstore's target, and
//     checks that guest A's backing file holds what guest B reported;
//   - stops it through the control port and expects PASS.
func TestLinuxTargetOverHostFwd(t *testing.T) {
	Require(t)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()

	const nqn = "nqn.2024-01.io.nearstore:linux-target"
	const size = 64 << 20
	g, err := Boot(ctx, BootOptions{
		Scenario: "ours-to-linux",
		Cmdline:  map[string]string{"nqn": nqn, "ns_size_mb": strconv.Itoa(size >> 20)},
		HostFwd:  map[int]int{GuestNVMePort: 0, GuestControlPort: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Stop() })
	if _, err := g.WaitFor(ctx, "INTEROP-READY"); err != nil {
		t.Fatal(err)
	}

	t.Run("ICReq", func(t *testing.T) {
		addr := g.HostAddr(GuestNVMePort)
		resp, err := ProbeICReq(ctx, addr)
		if err != nil {
			t.Fatalf("ICReq to the guest's nvmet at %s: %v\n%s", addr, err, g.Tail(30))
		}
		t.Logf("ICResp from %s: %+v", addr, resp)
		if resp.Type != 0x01 || resp.HLen != 128 || resp.PLen != 128 {
			t.Errorf("ICResp = %+v, want type 0x01, hlen 128, plen 128", resp)
		}
	})

	t.Run("Control", func(t *testing.T) {
		if r, err := g.Control(ctx, "ping"); err != nil || r != "pong" {
			t.Fatalf("control ping = %q, %v", r, err)
		}
		zero := md5.Sum(make([]byte, 1<<20))
		if r, err := g.Control(ctx, "md5 0 1048576"); err != nil || r != hex.EncodeToString(zero[:]) {
			t.Errorf("control md5 of the fresh backing file = %q, %v; want the md5 of zeros", r, err)
		}
	})

	t.Run("LinuxHostViaHostLoopback", func(t *testing.T) {
		res := Run(ctx, t, "host guest", BootOptions{
			Scenario: "host-to-ours",
			Cmdline: map[string]string{
				"nqn":         nqn,
				"target_addr": GuestGateway,
				"target_port": strconv.Itoa(g.HostPort(GuestNVMePort)),
				// The whole-namespace md5 is TestLinuxSelftest's job; through
				// two TCG guests and user-net it would add ~25 s here.
				"full_md5": "0",
				// Linux's own file-backed target on tmpfs refuses Write
				// Zeroes, which the kernel logs as I/O errors.
				"strict_io": "0",
			},
		})
		if len(res.Markers) != 1 {
			t.Fatalf("markers = %v, want 1", res.Markers)
		}
		// What the Linux host read through NVMe/TCP must be what the Linux
		// target's backing file holds.
		for _, r := range append(res.MD5, res.Markers[0].Region) {
			got, err := g.Control(ctx, fmt.Sprintf("md5 %d %d", r.Offset, r.Length))
			if err != nil {
				t.Fatal(err)
			}
			if got != r.MD5 {
				t.Errorf("bytes [%d,+%d): host guest read %s, target's backing file has %s", r.Offset, r.Length, r.MD5, got)
			}
		}
		if _, ok := res.MD5Of(0, 4<<20); !ok {
			t.Errorf("no INTEROP-MD5 for the first 4 MiB in %v", res.MD5)
		}
	})

	if _, err := g.Control(ctx, "stop"); err != nil {
		t.Fatal(err)
	}
	res, err := g.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Values["nqn"] != nqn {
		t.Errorf("INTEROP-VAL nqn = %q, want %q", res.Values["nqn"], nqn)
	}
	t.Logf("target guest passed in %v (log %s)", res.Duration.Round(time.Second), res.LogPath)
}

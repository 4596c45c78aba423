// Package security_test runs `nearstore target serve` as its own process
// and treats it as a hostile client would (issue 18), checking the target's
// own account of what hosts made it allocate (its metrics), that it stays
// up, and that a well-behaved host keeps working.
package security_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/testhost"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
)

const subNQN = "nqn.2026-11.io.nearstore:security"

// freePort returns a loopback address nothing listens on now.
// freePorts returns n distinct free loopback addresses: every listener
// stays open until all n are chosen, so the kernel cannot hand the same
// port out twice (it did, to --listen and --metrics).
func freePorts(t *testing.T, n int) []string {
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}

// serve starts a target process with args added and waits until it
// accepts connections; it returns its address and metrics address.
func serve(t *testing.T, args ...string) (addr, metrics string) {
	ports := freePorts(t, 2)
	addr, metrics = ports[0], ports[1]
	exited := clitest.Serve(t, addr, append([]string{"target", "serve", "--listen", addr, "--nqn", subNQN,
		"--volume", "mem:64MiB", "--metrics", metrics}, args...)...)
	t.Cleanup(func() {
		select {
		case <-exited:
			t.Error("the target process died")
		default:
		}
	})
	return addr, metrics
}

// metric scrapes one unlabelled metric.
func metric(t *testing.T, addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// rawAdmin is an admin queue spoken PDU by PDU, to send what no real host
// would.
type rawAdmin struct {
	t   *testing.T
	f   *tcp.Framer
	cid uint16
}

func dialAdmin(t *testing.T, addr, subnqn string) *rawAdmin {
	r := &rawAdmin{t: t, f: dialTCP(t, addr, 30*time.Second)}
	var cmd nvme.Command
	(&nvme.ConnectCommand{SQSize: 31}).ToCommand(&cmd)
	data := (&nvme.ConnectData{CNTLID: 0xFFFF, SubNQN: subnqn, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:hostile"}).Marshal()
	cmd.DPTR = nvme.SGL{Length: uint32(len(data)), Type: nvme.SGLDataBlockOffset}
	if st := r.exec(&cmd, data); !st.OK() {
		t.Fatalf("connect: %v", st)
	}
	var cc nvme.Command
	(&nvme.PropertyCommand{Offset: nvme.PropCC, Value: nvme.CCEnable | 6<<16 | 4<<20}).ToCommand(&cc, true)
	if st := r.exec(&cc, nil); !st.OK() {
		t.Fatalf("enable: %v", st)
	}
	return r
}

// exec sends cmd with in-capsule data and returns its status, skipping
// any data the target sends.
func (r *rawAdmin) exec(cmd *nvme.Command, data []byte) nvme.Status {
	r.cid++
	cmd.CID = r.cid
	cmd.Flags |= nvme.PSDTSGL
	if err := r.f.WriteCapsuleCmd(cmd, data); err != nil {
		r.t.Fatal(err)
	}
	_ = r.f.Flush()
	return awaitCompletion(r.t, r.f, nil).Status
}

// dialTCP connects to addr as an NVMe/TCP host, exchanges ICReq and
// ICResp, and returns the connection's framer, which fails every call
// after timeout; the connection closes when the test ends.
func dialTCP(t *testing.T, addr string, timeout time.Duration) *tcp.Framer {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(timeout))
	f := tcp.NewFramer(c, tcp.RoleHost, 64<<10)
	f.MaxData = 1 << 20
	if err := f.WriteICReq(tcp.ICReq{}); err != nil {
		t.Fatal(err)
	}
	_ = f.Flush()
	if h, err := f.ReadHeader(); err != nil || h.Type != tcp.TypeICResp {
		t.Fatalf("ICResp: %v", err)
	}
	return f
}

// awaitCompletion reads f's PDUs up to the next completion and returns
// it, putting the data the target sends at its offsets in in, or
// dropping it if in is nil.
func awaitCompletion(t *testing.T, f *tcp.Framer, in []byte) nvme.Completion {
	for {
		h, err := f.ReadHeader()
		if err != nil {
			t.Fatalf("reading the completion: %v", err)
		}
		switch h.Type {
		case tcp.TypeCapsuleResp:
			return h.Completion()
		case tcp.TypeC2HData:
			d := h.Data()
			buf := make([]byte, d.Length)
			if in != nil {
				buf = in[d.Offset : d.Offset+d.Length]
			}
			if err := f.ReadData(buf); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("PDU type %#x", h.Type)
		}
	}
}

// TestHostileClient: the findings of issue 18 a client can reproduce from
// outside, against the real process: Get Log Pages of 16 GiB on the
// discovery and NVM controllers, and a Connect of an admin queue deeper
// than 32. None is allocated for, the target stays up, and a well-behaved
// host writes and reads back afterwards.
func TestHostileClient(t *testing.T) {
	addr, metrics := serve(t)
	for _, sub := range []string{nvme.DiscoveryNQN, subNQN} {
		r := dialAdmin(t, addr, sub)
		lid := uint8(nvme.LogSMART)
		if sub == nvme.DiscoveryNQN {
			lid = nvme.LogDiscovery
		}
		for i := 0; i < 3; i++ {
			var cmd nvme.Command
			(&nvme.GetLogPageCommand{LID: lid, Length: 16 << 30}).ToCommand(&cmd)
			cmd.DPTR = nvme.SGL{Length: 4096, Type: nvme.SGLTransportDataBlock}
			if st := r.exec(&cmd, nil); st.OK() {
				t.Fatalf("a Get Log Page of 16 GiB on %s succeeded", sub)
			}
		}
	}
	if pk := metric(t, metrics, "nearstore_target_command_buffer_bytes_peak"); pk > 1<<20 {
		t.Fatalf("the target held %v bytes of command buffers at its peak", pk)
	}
	_, ns := testhost.Connect(t, addr, subNQN, 1, host.Options{HostNQN: "nqn.2014-08.org.nvmexpress:uuid:polite"})
	want := []byte(strings.Repeat("still here ", 372))[:4096]
	if _, err := ns.WriteAt(want, 8192); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	if _, err := ns.ReadAt(got, 8192); err != nil || string(got) != string(want) {
		t.Fatalf("read back: %v", err)
	}
	if n := metric(t, metrics, "nearstore_target_command_buffer_bytes"); n != 0 {
		t.Fatalf("%v bytes of command buffers held with no command running", n)
	}
}

// TestAccessControl: a target listening beyond loopback without allowed
// hosts refuses to start and says what to add; with --allow-host, only
// that host connects.
func TestAccessControl(t *testing.T) {
	r := clitest.Run(t, time.Minute, nil, nil, "target", "serve", "--listen", "0.0.0.0:0", "--volume", "mem:1MiB")
	if r.Code == 0 || !strings.Contains(r.Stderr, "--allow-host") {
		t.Fatalf("serving on 0.0.0.0 with no allowed host: exit %d\n%s", r.Code, r.Stderr)
	}
	const allowed = "nqn.2014-08.org.nvmexpress:uuid:allowed"
	addr, _ := serve(t, "--allow-host", allowed)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, hostNQN := range []string{allowed, "nqn.2014-08.org.nvmexpress:uuid:stranger"} {
		c, err := host.Connect(ctx, addr, subNQN, host.Options{HostNQN: hostNQN})
		if (err == nil) != (hostNQN == allowed) {
			t.Fatalf("%s connecting: %v", hostNQN, err)
		}
		if err == nil {
			c.Close()
		} else {
			t.Log(err)
		}
	}
}

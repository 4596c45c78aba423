package target

import (
	"errors"
	"net"
	"testing"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/volume"
)

const (
	hostA   = "nqn.2014-08.org.nvmexpress:uuid:host-a"
	hostB   = "nqn.2014-08.org.nvmexpress:uuid:host-b"
	openNQN = "nqn.2026-11.io.nearstore:open"
)

// connectAs sends a Connect for qid as host (NQN and host ID).
func (r *rawHost) connectAs(subnqn, host string, hostID [16]byte, qid uint16, cntlid uint16) nvme.Completion {
	r.t.Helper()
	var cmd nvme.Command
	sq := uint16(31)
	if qid != 0 {
		sq = 127
	}
	(&nvme.ConnectCommand{QID: qid, SQSize: sq}).ToCommand(&cmd)
	data := (&nvme.ConnectData{CNTLID: cntlid, SubNQN: subnqn, HostNQN: host, HostID: hostID}).Marshal()
	c := r.exec(&cmd, data, nil, true)
	if c.Status.OK() && qid == 0 {
		r.cntlid = uint16(c.DW0)
	}
	return c
}

func accessServer(t *testing.T) string {
	v1, err := volume.Open("mem:1MiB")
	must(t, err)
	t.Cleanup(func() { v1.Close() })
	v2, err := volume.Open("mem:1MiB")
	must(t, err)
	t.Cleanup(func() { v2.Close() })
	_, addr := startServer(t, Config{Subsystems: []SubsystemConfig{
		{NQN: testNQN, AllowedHosts: []string{hostA}, Namespaces: []NamespaceConfig{{Backend: v1, Name: "a"}}},
		{NQN: openNQN, AllowAnyHost: true, Namespaces: []NamespaceConfig{{Backend: v2, Name: "b"}}},
	}})
	return addr
}

// TestAllowedHosts: a subsystem with allowed hosts admits those alone, on
// the admin queue; a subsystem that allows any host admits anyone with an
// NQN; the empty NQN is no host.
func TestAllowedHosts(t *testing.T) {
	addr := accessServer(t)
	idA := [16]byte{1}
	for _, c := range []struct {
		sub, host string
		want      nvme.Status
	}{
		{testNQN, hostA, 0},
		{testNQN, hostB, nvme.StatusConnectInvalidHost | nvme.DNR},
		{testNQN, "", nvme.StatusConnectInvalidParameters | nvme.DNR},
		{openNQN, hostB, 0},
		{openNQN, "", nvme.StatusConnectInvalidParameters | nvme.DNR},
	} {
		r := dialRaw(t, addr, 0)
		if got := r.connectAs(c.sub, c.host, idA, 0, 0xFFFF).Status; got != c.want {
			t.Errorf("%s connecting to %s: %v, want %v", c.host, c.sub, got, c.want)
		}
		r.conn.Close()
	}
}

// TestIOQueueSameHost: an I/O queue joins a controller only with the admin
// queue's host NQN and host ID; knowing the CNTLID is not enough.
func TestIOQueueSameHost(t *testing.T) {
	addr := accessServer(t)
	idA, idB := [16]byte{1}, [16]byte{2}
	a := dialRaw(t, addr, 0)
	a.ok(a.connectAs(openNQN, hostA, idA, 0, 0xFFFF))
	a.ok(a.property(true, nvme.PropCC, false, nvme.CCEnable|6<<16|4<<20))
	for _, c := range []struct {
		host string
		id   [16]byte
	}{{hostB, idA}, {hostA, idB}, {hostB, idB}} {
		q := dialRaw(t, addr, 0)
		if got := q.connectAs(openNQN, c.host, c.id, 1, a.cntlid); got.Status != nvme.StatusConnectInvalidParameters|nvme.DNR {
			t.Errorf("I/O queue of %s/%x on %s's controller: %v", c.host, c.id[0], hostA, got.Status)
		}
		q.conn.Close()
	}
	q := dialRaw(t, addr, 0)
	q.ok(q.connectAs(openNQN, hostA, idA, 1, a.cntlid))
}

// TestDiscoveryListsAllowed: the discovery log lists only the subsystems
// the asking host may connect to.
func TestDiscoveryListsAllowed(t *testing.T) {
	addr := accessServer(t)
	for _, c := range []struct {
		host string
		want []string
	}{{hostA, []string{testNQN, openNQN}}, {hostB, []string{openNQN}}} {
		r := dialRaw(t, addr, 0)
		r.ok(r.connectAs(nvme.DiscoveryNQN, c.host, [16]byte{}, 0, 0xFFFF))
		r.ok(r.property(true, nvme.PropCC, false, nvme.CCEnable))
		log := make([]byte, 4096)
		r.ok(r.exec(logPage(nvme.LogDiscovery, len(log)), nil, log, false))
		_, n, entries, err := nvme.UnmarshalDiscoveryLog(log)
		must(t, err)
		var got []string
		for _, e := range entries[:n] {
			got = append(got, e.SubNQN)
		}
		if len(got) != len(c.want) || (len(got) > 0 && got[0] != c.want[0]) || (len(got) > 1 && got[1] != c.want[1]) {
			t.Errorf("discovery log for %s: %v, want %v", c.host, got, c.want)
		}
	}
}

// TestOpenSubsystemLoopbackOnly: a subsystem that names no allowed host
// serves on loopback, and refuses any other listener with an error that
// says what to do.
func TestOpenSubsystemLoopbackOnly(t *testing.T) {
	v, err := volume.Open("mem:1MiB")
	must(t, err)
	defer v.Close()
	for _, anyHost := range []bool{false, true} {
		s, err := New(Config{Subsystems: []SubsystemConfig{{NQN: testNQN, AllowAnyHost: anyHost, Namespaces: []NamespaceConfig{{Backend: v, Name: "m"}}}}})
		must(t, err)
		ln, err := net.Listen("tcp", ":0") // every address: not loopback
		must(t, err)
		served := make(chan error, 1)
		go func() { served <- s.Serve(ln) }()
		if !anyHost {
			if err := <-served; err == nil || errors.Is(err, ErrServerClosed) {
				t.Fatalf("Serve on %s of an open subsystem: %v", ln.Addr(), err)
			} else {
				t.Log(err)
			}
			continue
		}
		a := adminQueue(t, ln.Addr().String(), testNQN)
		a.ok(a.property(false, nvme.PropCSTS, false, 0))
		must(t, s.Close())
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Fatalf("Serve: %v", err)
		}
	}
}

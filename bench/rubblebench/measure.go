package rubblebench

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nearstore/nearstore/bench/hist"
	"github.com/nearstore/nearstore/bench/internal/harness"
)

// NodeUse is what one node process spent in one phase.
type NodeUse struct {
	ID   string `json:"id"`
	Role string `json:"role"` // primary, secondary or mixed
	// CPUSeconds is user + system CPU time, from /proc/PID/stat.
	CPUSeconds float64 `json:"cpu_s"`
	// Net is what the node's TCP sockets sent and received (loopback:
	// the client, the other nodes, etcd).
	Net harness.TCPBytes `json:"net_bytes"`
	// Compactions the node finished in the phase, the bytes they read
	// and wrote, and their wall time, from kv/lsm's "compacted" lines.
	Compactions           uint64  `json:"compactions"`
	CompactionBytes       uint64  `json:"compaction_bytes"`
	CompactionWallSeconds float64 `json:"compaction_wall_s"`
	// ShipMessages and ShipWrites are the write messages the node sent
	// down its chains in the phase and the writes in them
	// (chain.Node.ShipStats, from the node's "chain shipped" debug
	// lines, logged every second: a phase's count is off by at most a
	// second's worth at each end). ShipWrites/ShipMessages is group
	// commit's writes per message.
	ShipMessages uint64 `json:"ship_messages"`
	ShipWrites   uint64 `json:"ship_writes"`
}

// Roles is one figure split by role: the primary's, a secondary's (the
// mean over the secondaries), all the secondaries' together, and the
// whole group's (every node).
type Roles struct {
	Primary     float64 `json:"primary"`
	Secondary   float64 `json:"secondary"`
	Secondaries float64 `json:"secondaries"`
	Total       float64 `json:"total"`
}

// Phase is one workload in one run of one mode, or (Run 0, no Nodes)
// the median of its runs.
type Phase struct {
	Mode      string  `json:"mode"`
	Replicas  int     `json:"replicas"`
	Workload  string  `json:"workload"` // load, A, B, C or F
	Run       int     `json:"run"`      // 1…; 0 for a median
	Ops       uint64  `json:"ops"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	// CPUus is CPU time per operation, in µs.
	CPUus Roles `json:"cpu_us_per_op"`
	// NetBytes is TCP bytes sent plus received per operation.
	NetBytes Roles `json:"net_bytes_per_op"`
	// Compactions finished in the phase, and their wall time in ms
	// (kv/lsm logs no CPU time for them).
	Compactions  Roles `json:"compactions"`
	CompactionMs Roles `json:"compaction_wall_ms"`
	// WritesPerShip is the writes per Ship message the primary sent (and
	// a secondary, the mean over those that sent any).
	WritesPerShip Roles `json:"writes_per_ship_msg"`
	// MixedRoles: some node headed some groups and not others, so its
	// figures count in Total only.
	MixedRoles bool `json:"mixed_roles,omitempty"`
	// ClosedSockets is how many of the nodes' sockets closed during the
	// phase, their last bytes uncounted.
	ClosedSockets int       `json:"closed_sockets,omitempty"`
	Nodes         []NodeUse `json:"nodes,omitempty"`
}

// meter samples a running cluster's nodes.
type meter struct {
	cl    *harness.ChainCluster
	logs  map[string]*nodeLog
	roles map[string]string
}

// sample is the nodes' counters at one moment.
type sample struct {
	cpu  map[string]time.Duration
	tcp  harness.TCPSnapshot
	comp map[string]compactions
	ship map[string]shipped
}

func (m *meter) sample() (sample, error) {
	s := sample{cpu: map[string]time.Duration{}, comp: map[string]compactions{}, ship: map[string]shipped{}}
	var pids []int
	for _, n := range m.cl.Nodes {
		cpu, err := harness.ProcCPU(strconv.Itoa(n.Proc.Pid()))
		if err != nil {
			return s, fmt.Errorf("node %s: %w", n.ID, err)
		}
		s.cpu[n.ID] = cpu
		s.comp[n.ID] = m.logs[n.ID].counts()
		s.ship[n.ID] = m.logs[n.ID].shipped()
		pids = append(pids, n.Proc.Pid())
	}
	var err error
	s.tcp, err = harness.SnapshotTCP(pids)
	return s, err
}

// phase makes the phase's report from its samples.
func (m *meter) phase(c *clusterRun, workload string, ops uint64, el time.Duration, h *hist.Histogram, before, after sample) Phase {
	p := Phase{Mode: c.mode.Name, Replicas: c.replicas, Workload: workload, Run: c.run, Ops: ops, Seconds: el.Seconds(),
		OpsPerSec: float64(ops) / el.Seconds()}
	p.P50us, p.P99us = latencies(h)
	var moved map[int]harness.TCPBytes
	moved, p.ClosedSockets = after.tcp.Since(before.tcp)
	for _, n := range m.cl.Nodes {
		c0, c1 := before.comp[n.ID], after.comp[n.ID]
		u := NodeUse{ID: n.ID, Role: m.roles[n.ID], CPUSeconds: (after.cpu[n.ID] - before.cpu[n.ID]).Seconds(), Net: moved[n.Proc.Pid()],
			Compactions: c1.n - c0.n, CompactionBytes: c1.bytes - c0.bytes, CompactionWallSeconds: (c1.wall - c0.wall).Seconds()}
		s0, s1 := before.ship[n.ID], after.ship[n.ID]
		u.ShipMessages, u.ShipWrites = s1.total().messages-s0.total().messages, s1.total().writes-s0.total().writes
		p.MixedRoles = p.MixedRoles || u.Role == RoleMixed
		p.Nodes = append(p.Nodes, u)
	}
	perOp := 1 / float64(ops)
	p.CPUus = byRole(p.Nodes, func(u NodeUse) float64 { return u.CPUSeconds * 1e6 * perOp })
	p.NetBytes = byRole(p.Nodes, func(u NodeUse) float64 { return float64(u.Net.Sent+u.Net.Received) * perOp })
	p.Compactions = byRole(p.Nodes, func(u NodeUse) float64 { return float64(u.Compactions) })
	p.CompactionMs = byRole(p.Nodes, func(u NodeUse) float64 { return u.CompactionWallSeconds * 1e3 })
	p.WritesPerShip = writesPerShip(p.Nodes)
	return p
}

// byRole sums f over the nodes of each role.
func byRole(nodes []NodeUse, f func(NodeUse) float64) Roles {
	var r Roles
	secondaries := 0
	for _, u := range nodes {
		v := f(u)
		r.Total += v
		switch u.Role {
		case RolePrimary:
			r.Primary += v
		case RoleSecondary:
			r.Secondaries += v
			secondaries++
		}
	}
	if secondaries > 0 {
		r.Secondary = r.Secondaries / float64(secondaries)
	}
	return r
}

// writesPerShip is writes per Ship message by role: the primary's, and
// the secondaries' that sent any (a tail sends none) pooled.
func writesPerShip(nodes []NodeUse) Roles {
	var r Roles
	var secM, secW, allM, allW uint64
	for _, u := range nodes {
		allM, allW = allM+u.ShipMessages, allW+u.ShipWrites
		switch u.Role {
		case RolePrimary:
			if u.ShipMessages > 0 {
				r.Primary = float64(u.ShipWrites) / float64(u.ShipMessages)
			}
		case RoleSecondary:
			secM, secW = secM+u.ShipMessages, secW+u.ShipWrites
		}
	}
	if secM > 0 {
		r.Secondary = float64(secW) / float64(secM)
		r.Secondaries = r.Secondary
	}
	if allM > 0 {
		r.Total = float64(allW) / float64(allM)
	}
	return r
}

// shipped is a node's latest "chain shipped" counts, per group.
type shipped map[string]shipCount

type shipCount struct{ messages, writes uint64 }

func (s shipped) total() shipCount {
	var t shipCount
	for _, c := range s {
		t.messages += c.messages
		t.writes += c.writes
	}
	return t
}

// compactions is a node's compaction counters so far.
type compactions struct {
	n, bytes uint64
	wall     time.Duration
}

// nodeLog is a node's standard error: it counts kv/lsm's "compacted"
// debug lines and passes the node's warnings and errors on to fwd.
type nodeLog struct {
	id  string
	fwd io.Writer

	mu      sync.Mutex
	partial []byte
	c       compactions
	ship    shipped
}

func (l *nodeLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.line(string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > 1<<20 { // no newline in a megabyte: not log lines
		l.partial = l.partial[:0]
	}
	return len(b), nil
}

func (l *nodeLog) line(s string) {
	if in, out, took, ok := parseCompacted(s); ok {
		l.c.n++
		l.c.bytes += in + out
		l.c.wall += took
		return
	}
	if group, c, ok := parseShipped(s); ok {
		if l.ship == nil {
			l.ship = shipped{}
		}
		l.ship[group] = c
		return
	}
	if l.fwd != nil && (strings.Contains(s, "level=WARN") || strings.Contains(s, "level=ERROR")) {
		fmt.Fprintf(l.fwd, "%s: %s\n", l.id, s)
	}
}

func (l *nodeLog) counts() compactions {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c
}

func (l *nodeLog) shipped() shipped {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(shipped, len(l.ship))
	for g, c := range l.ship {
		out[g] = c
	}
	return out
}

// parseShipped reads the node's chain.Node.ShipStats line as slog's text
// handler prints it: "… msg=\"chain shipped\" group=G messages=N
// writes=W".
func parseShipped(line string) (group string, c shipCount, ok bool) {
	i := strings.Index(line, `msg="chain shipped" `)
	if i < 0 {
		return "", c, false
	}
	var haveG, haveM, haveW bool
	for _, f := range strings.Fields(line[i+len(`msg="chain shipped" `):]) {
		k, v, _ := strings.Cut(f, "=")
		var err error
		switch k {
		case "group":
			group, haveG = v, true
		case "messages":
			c.messages, err = strconv.ParseUint(v, 10, 64)
			haveM = err == nil
		case "writes":
			c.writes, err = strconv.ParseUint(v, 10, 64)
			haveW = err == nil
		}
	}
	return group, c, haveG && haveM && haveW
}

// parseCompacted reads kv/lsm's compaction line as slog's text handler
// prints it: "… msg=compacted from=0 to=1 … in=BYTES out=BYTES
// took=DURATION".
func parseCompacted(line string) (in, out uint64, took time.Duration, ok bool) {
	var seen, haveIn, haveOut, haveTook bool
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		var err error
		switch k {
		case "msg":
			seen = v == "compacted"
		case "in":
			in, err = strconv.ParseUint(v, 10, 64)
			haveIn = err == nil
		case "out":
			out, err = strconv.ParseUint(v, 10, 64)
			haveOut = err == nil
		case "took":
			took, err = time.ParseDuration(v)
			haveTook = err == nil
		}
	}
	return in, out, took, seen && haveIn && haveOut && haveTook
}

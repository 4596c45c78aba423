package functions_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// tree is a B+-tree written to a namespace, scattered over several
// extents, with what a host needs to query it and check the answers.
type tree struct {
	keys          []uint64
	index, values []byte
	files         []pushdown.File
	levels        int
}

// writeTree builds a B+-tree over keys with the given fanout and writes
// its index file and value log to ns: the index in extents of 7 blocks
// placed backwards from LBA 12000, the values in extents of 5 blocks from
// LBA 100 upwards with a gap after each, so every lookup crosses extents.
func writeTree(t testing.TB, ns *host.Namespace, keys []uint64, fanout int) *tree {
	t.Helper()
	tr := &tree{keys: keys}
	tr.index, tr.values = functions.BuildBTreeFanout(keys, functions.DefaultValueSize, fanout)
	var ip, vp extentPlan
	for i := uint64(0); i*7*bs < uint64(len(tr.index)); i++ {
		ip.lbas = append(ip.lbas, 12000-7*(i+1)*2)
	}
	ip.blocks = []uint32{7}
	for i := uint64(0); i*5*bs < uint64(len(tr.values)); i++ {
		vp.lbas = append(vp.lbas, 100+i*6)
	}
	vp.blocks = []uint32{5}
	if last := ip.lbas[len(ip.lbas)-1]; last <= vp.lbas[len(vp.lbas)-1]+5 {
		t.Fatalf("tree too large for its layout")
	}
	tr.files = []pushdown.File{place(t, ns, tr.index, ip), place(t, ns, tr.values, vp)}
	// Count the levels by walking to the leftmost leaf.
	for off := uint64(0); ; {
		n, err := functions.ParseNode(tr.index[off:])
		if err != nil {
			t.Fatal(err)
		}
		tr.levels++
		if n.Type == functions.NodeLeaf {
			break
		}
		off = n.Ptr[0] & functions.PtrMask
	}
	return tr
}

// lookup runs a get of key at the target and checks it against the same
// lookup run host-side by the Go reference (functions.BTreeStep over the
// in-memory files), byte for byte, and against the tree's contents. It
// returns the target's result.
func (tr *tree) lookup(t testing.TB, ns *host.Namespace, fn sandbox.ID, key uint64) pushdown.Result {
	t.Helper()
	scratch := make([]byte, sandbox.ScratchSize)
	functions.BTreeRequest{Mode: functions.BTreeGet, Key: key, ValueSize: functions.DefaultValueSize}.Encode(scratch)
	ref := bytes.Clone(scratch)
	steps, err := functions.RunPushdown(functions.BTreeStep, ref, [][]byte{tr.index, tr.values},
		sandbox.Next{File: functions.IndexFile, Offset: 0, Len: functions.NodeSize}, sandbox.Limits{})
	if err != nil {
		t.Fatalf("host-side lookup of %d: %v", key, err)
	}
	res, err := ns.Pushdown(context.Background(), fn, tr.files, host.Start{File: functions.IndexFile, Length: functions.NodeSize}, scratch)
	if err != nil {
		t.Fatalf("pushdown lookup of %d: %v", key, err)
	}
	if !res.Done || res.Code != 0 {
		t.Errorf("key %d: done %v code %d", key, res.Done, res.Code)
	}
	if !bytes.Equal(res.Output, ref) {
		t.Errorf("key %d: the target's scratch differs from the host-side lookup's", key)
	}
	if int(res.Steps) != steps {
		t.Errorf("key %d: %d steps at the target, %d host-side", key, res.Steps, steps)
	}
	got, err := functions.ParseBTreeResult(res.Output)
	if err != nil {
		t.Fatal(err)
	}
	_, present := slicesIndex(tr.keys, key)
	switch {
	case present && (got.Status != functions.BTreeFound || !bytes.Equal(got.Value, functions.BTreeValue(key, functions.DefaultValueSize))):
		t.Errorf("key %d: status %d value %x, want found with its value", key, got.Status, got.Value)
	case !present && got.Status != functions.BTreeNotFound:
		t.Errorf("absent key %d: status %d", key, got.Status)
	}
	if int(got.Nodes) != tr.levels {
		t.Errorf("key %d: read %d nodes of a %d-level tree", key, got.Nodes, tr.levels)
	}
	return res
}

func slicesIndex(keys []uint64, k uint64) (int, bool) {
	lo, hi := 0, len(keys)
	for lo < hi {
		m := (lo + hi) / 2
		if keys[m] < k {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(keys) && keys[lo] == k
}

// TestPushdownOneCommand: a lookup walking a 7-level B+-tree (seven
// dependent node reads, then the value) costs exactly one NVMe command
// and one round trip, in both runtimes: the host sends one command and
// receives one result, the target's metrics count one pushdown and no
// ordinary read, and the result reports the eight reads the target issued
// itself and the bytes they read.
func TestPushdownOneCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{limits: generous})
	rng := rand.New(rand.NewPCG(1, 2))
	// Fanout 3: 3^6 < 1500 leaves' worth of keys <= 3^7, so 7 levels.
	tr := writeTree(t, e.ns, sortedKeys(rng, 1500), 3)
	if tr.levels != 7 {
		t.Fatalf("the tree has %d levels, want 7", tr.levels)
	}
	for _, kind := range kinds {
		t.Run(kind.String(), func(t *testing.T) {
			fn := e.load("btree_lookup", kind)
			key := tr.keys[rng.IntN(len(tr.keys))]
			tr.lookup(t, e.ns, fn, key) // warm: instances and pools

			hostBefore := e.ctrl.Stats()
			tgtBefore := e.commandsByOp(1)
			readBytes := e.counter("nearstore_target_bytes_total", map[string]string{"nsid": "1", "direction": "read"})
			key = tr.keys[rng.IntN(len(tr.keys))]
			res := tr.lookup(t, e.ns, fn, key)
			hostAfter := e.ctrl.Stats()

			if n := hostAfter.Commands - hostBefore.Commands; n != 1 {
				t.Errorf("the host sent %d commands, want 1", n)
			}
			if n := hostAfter.Completions - hostBefore.Completions; n != 1 {
				t.Errorf("the host received %d completions, want 1", n)
			}
			// One command moves the request out and one result back.
			if n := hostAfter.BytesRead - hostBefore.BytesRead; n != pushdown.ResultSize+sandbox.ScratchSize {
				t.Errorf("the host received %d bytes of data, want one result of %d", n, pushdown.ResultSize+sandbox.ScratchSize)
			}
			d := e.commandsSince(1, tgtBefore)
			if len(d) != 1 || d["pushdown/ok"] != 1 {
				t.Errorf("the target completed %v on the namespace, want exactly one successful pushdown", d)
			}
			if n := e.counter("nearstore_target_bytes_total", map[string]string{"nsid": "1", "direction": "read"}) - readBytes; n != 0 {
				t.Errorf("the target sent %v bytes of ordinary reads", n)
			}
			// 7 nodes and the value, each its own read at the target.
			wantBytes := uint64(7*functions.NodeSize + functions.DefaultValueSize)
			if res.Steps != 8 || res.Reads != 8 || res.BytesRead != wantBytes {
				t.Errorf("result reports %d steps, %d reads, %d bytes; want 8, 8, %d", res.Steps, res.Reads, res.BytesRead, wantBytes)
			}
		})
	}
}

// TestBTreeLookup: btree_lookup over a B+-tree of at least six levels
// written to the namespace, looking up present and absent keys (and keys
// below and above every key), in both runtimes: every answer matches the
// host-side lookup.
func TestBTreeLookup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{limits: generous})
	rng := rand.New(rand.NewPCG(3, 4))
	tr := writeTree(t, e.ns, sortedKeys(rng, 5000), 4)
	if tr.levels < 6 {
		t.Fatalf("the tree has %d levels, want at least 6", tr.levels)
	}
	probes := []uint64{0, 1, tr.keys[0], tr.keys[len(tr.keys)-1], tr.keys[len(tr.keys)-1] + 1, functions.KeyNone - 1}
	for range 40 {
		k := tr.keys[rng.IntN(len(tr.keys))]
		probes = append(probes, k, k+1, k-1)
	}
	for _, kind := range kinds {
		t.Run(kind.String(), func(t *testing.T) {
			fn := e.load("btree_lookup", kind)
			found := 0
			for _, k := range probes {
				res := tr.lookup(t, e.ns, fn, k)
				if r, _ := functions.ParseBTreeResult(res.Output); r.Status == functions.BTreeFound {
					found++
				}
			}
			if found == 0 || found == len(probes) {
				t.Errorf("%d of %d probes found: want both present and absent keys", found, len(probes))
			}
		})
	}
}

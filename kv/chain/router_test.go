package chain_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/chain/lsmstore"
	"github.com/nearstore/nearstore/kv/lsm"
)

// startHost runs node id hosting groups, each on its own lsm store, on
// one real TCP listener; the returned func stops it.
func startHost(t *testing.T, r *rig, id string, groups []string) func() {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*chain.Node
	var stores []*lsmstore.Store
	for _, g := range groups {
		st, err := lsmstore.Open(filepath.Join(r.dir, id, g), lsm.Options{})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, st)
		n, err := chain.NewNode(chain.NodeConfig{ID: id, Group: g, Addr: ln.Addr().String(), Store: st, Control: r.ctl})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	h, err := chain.NewHost(chain.HostConfig{ID: id, Addr: ln.Addr().String(), Control: r.ctl}, nodes...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, ln) }()
	return func() {
		cancel()
		<-done
		for _, st := range stores {
			st.Close()
		}
	}
}

// startSharded writes the uniform shard map of groups and a chain of ids
// for each, starts a host per id serving every group, and waits for the
// chains to be whole; it returns each host's stop.
func startSharded(ctx context.Context, t *testing.T, r *rig, groups, ids []string) map[string]func() {
	t.Helper()
	m, err := cluster.UniformShards(groups)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ctl.CreateShardMap(ctx, m); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if _, err := r.ctl.CreateChain(ctx, g, ids); err != nil {
			t.Fatal(err)
		}
	}
	stops := map[string]func(){}
	for _, id := range ids {
		stops[id] = startHost(t, r, id, groups)
	}
	for _, g := range groups {
		waitGroup(t, r.ctl, g, func(c cluster.Chain) bool { return len(c.Members) == len(ids) && c.Joining == "" })
	}
	return stops
}

func TestRouterShardsAcrossGroups(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	groups := []string{"g0", "g1", "g2"}
	stops := startSharded(ctx, t, r, groups, []string{"a", "b", "c"})
	t.Cleanup(func() {
		for _, stop := range stops {
			stop()
		}
	})
	m, err := r.ctl.ShardMap(ctx)
	if err != nil {
		t.Fatal(err)
	}

	rt, err := chain.NewRouter(ctx, chain.RouterConfig{Control: r.ctl, Reads: chain.ReadCRRS})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	// Keys over the whole first-byte range land in every group.
	var keys []string
	for i := range 96 {
		keys = append(keys, fmt.Sprintf("%c-key-%03d", byte(i*255/95), i))
	}
	for _, k := range keys {
		if err := rt.Put(ctx, []byte(k), []byte("v:"+k)); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
	}
	if err := rt.Delete(ctx, []byte(keys[5])); err != nil {
		t.Fatal(err)
	}
	checkAll(ctx, t, rt, keys, 5)
	// Each key is its own group's only: read the groups directly; the
	// others refuse it (OutOfRange), and a write to it.
	for _, k := range keys[6:] {
		owner := m.Group([]byte(k))
		for _, g := range groups {
			c, err := rt.Group(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			_, found, err := c.Get(ctx, []byte(k))
			if g == owner {
				if err != nil || !found {
					t.Fatalf("key %q of group %s: found=%v %v", k, g, found, err)
				}
				continue
			}
			if status.Code(err) != codes.OutOfRange {
				t.Fatalf("key %q (group %s) read in group %s: found=%v %v", k, owner, g, found, err)
			}
			if err := c.Put(ctx, []byte(k), []byte("x")); status.Code(err) != codes.OutOfRange {
				t.Fatalf("key %q (group %s) written in group %s: %v", k, owner, g, err)
			}
		}
	}

	// Scans cross shard boundaries in key order, with and without limits.
	live := slices.Delete(slices.Clone(keys), 5, 6)
	slices.Sort(live)
	for _, tc := range []struct {
		start, end string
		limit      int
	}{
		{"", "", 0}, {"", "", 10}, {"\x30", "\xc0", 0}, {"\x30", "\xc0", 7}, {"\x55", "\x56", 0}, {"\xf0", "", 0},
	} {
		var end []byte
		if tc.end != "" {
			end = []byte(tc.end)
		}
		got, err := rt.Scan(ctx, []byte(tc.start), end, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, k := range live {
			if k >= tc.start && (tc.end == "" || k < tc.end) && (tc.limit == 0 || len(want) < tc.limit) {
				want = append(want, k)
			}
		}
		var gotKeys []string
		for _, kv := range got {
			gotKeys = append(gotKeys, string(kv.Key))
			if string(kv.Value) != "v:"+string(kv.Key) {
				t.Fatalf("scan value of %q: %q", kv.Key, kv.Value)
			}
		}
		if !slices.Equal(gotKeys, want) {
			t.Fatalf("scan [%q,%q) limit %d: %q, want %q", tc.start, tc.end, tc.limit, gotKeys, want)
		}
	}

	// One lease per host: stopping host a takes it out of every group's
	// chain, and every key stays readable and writable through the router.
	stops["a"]()
	delete(stops, "a")
	for _, g := range groups {
		waitGroup(t, r.ctl, g, func(c cluster.Chain) bool { return !slices.Contains(c.Members, "a") && len(c.Members) == 2 })
	}
	checkAll(ctx, t, rt, keys, 5)
	if err := rt.Put(ctx, []byte(keys[5]), []byte("v:"+keys[5])); err != nil {
		t.Fatal(err)
	}
	checkAll(ctx, t, rt, keys, -1)
}

func TestNewHostRefuses(t *testing.T) {
	r := newRig(t)
	mk := func(id, group string) *chain.Node {
		st, err := lsmstore.Open(filepath.Join(r.dir, id+group), lsm.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		n, err := chain.NewNode(chain.NodeConfig{ID: id, Group: group, Addr: "127.0.0.1:1", Store: st, Control: r.ctl})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a0, a0b, b1 := mk("a", "g0"), mk("a", "g0"), mk("b", "g1")
	for _, tc := range []struct {
		name  string
		cfg   chain.HostConfig
		nodes []*chain.Node
	}{
		{"no nodes", chain.HostConfig{ID: "a", Control: r.ctl}, nil},
		{"no ID", chain.HostConfig{Control: r.ctl}, []*chain.Node{a0}},
		{"no control plane", chain.HostConfig{ID: "a"}, []*chain.Node{a0}},
		{"another node's replica", chain.HostConfig{ID: "a", Control: r.ctl}, []*chain.Node{a0, b1}},
		{"a group twice", chain.HostConfig{ID: "a", Control: r.ctl}, []*chain.Node{a0, a0b}},
	} {
		if _, err := chain.NewHost(tc.cfg, tc.nodes...); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// checkAll reads every key of keys but the one at index skip back.
func checkAll(ctx context.Context, t *testing.T, rt *chain.Router, keys []string, skip int) {
	t.Helper()
	for i, k := range keys {
		v, found, err := rt.Get(ctx, []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if want := i != skip; found != want || (found && string(v) != "v:"+k) {
			t.Fatalf("get %q: %q found=%v", k, v, found)
		}
	}
}

func waitGroup(t *testing.T, ctl *cluster.Control, group string, ok func(cluster.Chain) bool) cluster.Chain {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := ctl.Chain(context.Background(), group); err == nil && ok(c) {
			return c
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := ctl.Chain(context.Background(), group)
	t.Fatalf("group %s never reached the wanted state: %+v %v", group, c, err)
	return c
}

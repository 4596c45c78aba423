package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestShardMapValidate(t *testing.T) {
	b := func(s string) []byte {
		if s == "" {
			return nil
		}
		return []byte(s)
	}
	sh := func(start, end, g string) Shard { return Shard{Start: b(start), End: b(end), Group: g} }
	for _, tc := range []struct {
		name   string
		shards []Shard
		err    string // "" for a valid map
	}{
		{"one shard", []Shard{sh("", "", "g0")}, ""},
		{"three shards", []Shard{sh("", "f", "g0"), sh("f", "p", "g1"), sh("p", "", "g0")}, ""},
		{"empty", nil, "no shards"},
		{"first not at empty key", []Shard{sh("a", "", "g0")}, "not at the empty key"},
		{"gap", []Shard{sh("", "f", "g0"), sh("g", "", "g1")}, "ends at"},
		{"overlap", []Shard{sh("", "g", "g0"), sh("f", "", "g1")}, "ends at"},
		{"last bounded", []Shard{sh("", "f", "g0")}, "want no bound"},
		{"unbounded middle", []Shard{sh("", "", "g0"), sh("f", "", "g1")}, "not the last"},
		{"empty range", []Shard{sh("", "f", "g0"), sh("f", "f", "g1"), sh("f", "", "g2")}, "is empty"},
		{"no group", []Shard{sh("", "", "")}, "no group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ShardMap{Version: 1, Shards: tc.shards}.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("valid map refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("want error containing %q, got %v", tc.err, err)
			}
		})
	}
}

func TestShardMapLookup(t *testing.T) {
	m := ShardMap{Version: 1, Shards: []Shard{
		{Start: nil, End: []byte("f"), Group: "a"},
		{Start: []byte("f"), End: []byte("p"), Group: "b"},
		{Start: []byte("p"), Group: "c"},
	}}
	for _, tc := range []struct{ key, group string }{
		{"", "a"}, {"a", "a"}, {"ezzz", "a"}, {"f", "b"}, {"f\x00", "b"}, {"ozz", "b"}, {"p", "c"}, {"zzzz", "c"}, {"\xff\xff", "c"},
	} {
		if g := m.Group([]byte(tc.key)); g != tc.group {
			t.Errorf("key %q: group %s, want %s", tc.key, g, tc.group)
		}
		if !m.Shards[m.Lookup([]byte(tc.key))].Contains([]byte(tc.key)) {
			t.Errorf("key %q: its shard does not contain it", tc.key)
		}
	}
	if got := m.Groups(); strings.Join(got, ",") != "a,b,c" {
		t.Errorf("groups %v", got)
	}
}

func TestUniformShards(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 7, 256} {
		var groups []string
		for i := range n {
			groups = append(groups, "g"+strings.Repeat("x", i))
		}
		m, err := UniformShards(groups)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if len(m.Groups()) != n {
			t.Fatalf("n=%d: %d groups", n, len(m.Groups()))
		}
		// Every first byte lands in a shard; each group gets a near-equal slice.
		count := map[string]int{}
		for c := range 256 {
			count[m.Group([]byte{byte(c), 'k'})]++
		}
		for g, k := range count {
			if k < 256/n || k > 256/n+1 {
				t.Errorf("n=%d: group %s holds %d first bytes", n, g, k)
			}
		}
	}
	if _, err := UniformShards(nil); err == nil {
		t.Fatal("no groups accepted")
	}
}

func TestShardMapOnEtcd(t *testing.T) {
	c := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.ShardMap(ctx); !errors.Is(err, ErrNoShardMap) {
		t.Fatalf("want ErrNoShardMap, got %v", err)
	}
	m, _ := UniformShards([]string{"g0", "g1"})
	got, err := c.CreateShardMap(ctx, m)
	if err != nil || len(got.Shards) != 2 {
		t.Fatalf("create: %+v %v", got, err)
	}
	// A second create keeps the first map.
	m3, _ := UniformShards([]string{"a", "b", "c"})
	if got, err := c.CreateShardMap(ctx, m3); err != nil || len(got.Shards) != 2 || got.Shards[1].Group != "g1" {
		t.Fatalf("second create: %+v %v", got, err)
	}
	// A bad value in etcd is an error, not a map.
	if _, err := c.Client.Put(ctx, c.ShardMapKey(), `{"version":1,"shards":[]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ShardMap(ctx); err == nil {
		t.Fatal("invalid stored map accepted")
	}
}

func FuzzDecodeShardMap(f *testing.F) {
	m, _ := UniformShards([]string{"g0", "g1", "g2"})
	b, _ := EncodeShardMap(m)
	f.Add(b)
	f.Add([]byte(`{"version":1,"shards":[{"start":"","group":"g"}]}`))
	f.Add([]byte(`{"shards":[{"start":"YQ==","group":"g"}]}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeShardMap(b)
		if err != nil {
			return
		}
		// A decoded map routes every key to exactly one of its shards.
		for _, k := range [][]byte{nil, {0}, []byte("k"), {0xff, 0xff}} {
			i := m.Lookup(k)
			if !m.Shards[i].Contains(k) {
				t.Fatalf("key %q routed to shard %d %+v", k, i, m.Shards[i])
			}
		}
		if _, err := EncodeShardMap(m); err != nil {
			t.Fatalf("decoded map does not encode: %v", err)
		}
	})
}

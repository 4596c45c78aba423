package cluster

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sh(start, end, g string) Shard {
	s := Shard{Group: g}
	if start != "" {
		s.Start = []byte(start)
	}
	if end != "" {
		s.End = []byte(end)
	}
	return s
}

func TestMoveTransitions(t *testing.T) {
	m := ShardMap{Version: 4, Shards: []Shard{sh("", "f", "g0"), sh("f", "p", "g1"), sh("p", "", "g0")}}
	// Begin: [h, m) of g1's shard becomes its own frozen, moving shard.
	b, err := BeginMove(m, []byte("h"), []byte("m"), "g0")
	if err != nil {
		t.Fatal(err)
	}
	moving := sh("h", "m", "g1")
	moving.Frozen, moving.MovingTo = true, "g0"
	want := ShardMap{Version: 5, Shards: []Shard{sh("", "f", "g0"), sh("f", "h", "g1"), moving, sh("m", "p", "g1"), sh("p", "", "g0")}}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("begin: %+v\nwant %+v", b, want)
	}
	for _, tc := range []struct {
		group, key  string
		write, read bool
		scanTo      string
		scan        bool
	}{
		{"g1", "i", false, true, "l", true},   // the old owner: reads, no writes
		{"g0", "i", true, false, "l", true},   // the new one: the copy's writes and scans
		{"g1", "g", true, true, "i", true},    // g1's unfrozen rest
		{"g0", "g", false, false, "i", false}, // not g0's
	} {
		if got := b.CanWrite(tc.group, []byte(tc.key)); got != tc.write {
			t.Errorf("CanWrite(%s, %s) = %v", tc.group, tc.key, got)
		}
		if got := b.CanRead(tc.group, []byte(tc.key)); got != tc.read {
			t.Errorf("CanRead(%s, %s) = %v", tc.group, tc.key, got)
		}
		if got := b.CanScan(tc.group, []byte(tc.key), []byte(tc.scanTo)); got != tc.scan {
			t.Errorf("CanScan(%s, %s, %s) = %v", tc.group, tc.key, tc.scanTo, got)
		}
	}
	if _, err := BeginMove(b, []byte("a"), []byte("b"), "g1"); err == nil || !strings.Contains(err.Error(), "already moving") {
		t.Fatalf("second move: %v", err)
	}
	s, err := SwitchMove(b)
	if err != nil || s.Version != 6 || s.Shards[2].Group != "g0" || !s.Shards[2].Frozen || s.Shards[2].MovingTo != "" {
		t.Fatalf("switch: %+v %v", s, err)
	}
	if s.CanWrite("g0", []byte("i")) || !s.CanRead("g0", []byte("i")) || s.CanRead("g1", []byte("i")) {
		t.Fatal("switched shard: want reads at g0 only, no writes")
	}
	e, err := EndMove(s, []byte("h"))
	if err != nil {
		t.Fatal(err)
	}
	want = ShardMap{Version: 7, Shards: []Shard{sh("", "f", "g0"), sh("f", "h", "g1"), sh("h", "m", "g0"), sh("m", "p", "g1"), sh("p", "", "g0")}}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("end: %+v", e)
	}
	// Moving [f, h) and [m, p) to g0 too merges the map back to one shard.
	for _, r := range [][2]string{{"f", "h"}, {"m", "p"}} {
		b, err := BeginMove(e, []byte(r[0]), []byte(r[1]), "g0")
		if err != nil {
			t.Fatal(err)
		}
		if s, err = SwitchMove(b); err != nil {
			t.Fatal(err)
		}
		if e, err = EndMove(s, []byte(r[0])); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(e.Shards, []Shard{sh("", "", "g0")}) || e.Version != 13 {
		t.Fatalf("merged: %+v", e)
	}
	// Abort thaws and merges back.
	b, err = BeginMove(m, []byte("p"), nil, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if a, err := AbortMove(b); err != nil || !reflect.DeepEqual(a.Shards, m.Shards) || a.Version != 6 {
		t.Fatalf("abort: %+v %v", a, err)
	}
	for _, tc := range []struct {
		name       string
		start, end string
		to         string
		err        string
	}{
		{"empty range", "h", "h", "g0", "empty range"},
		{"two groups", "a", "h", "g1", "not one unfrozen group's"},
		{"to itself", "g", "h", "g1", "already"},
		{"no group", "g", "h", "", "no group"},
	} {
		var end []byte
		if tc.end != "" {
			end = []byte(tc.end)
		}
		if _, err := BeginMove(m, []byte(tc.start), end, tc.to); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	if _, err := SwitchMove(m); err == nil {
		t.Error("switched with no move")
	}
	if _, err := EndMove(m, []byte("f")); err == nil {
		t.Error("ended with no move")
	}
}

func TestShardMapValidateMoves(t *testing.T) {
	frozen := func(s Shard, to string) Shard { s.Frozen, s.MovingTo = true, to; return s }
	for _, tc := range []struct {
		name   string
		shards []Shard
		err    string
	}{
		{"moving unfrozen", []Shard{{Group: "g0", MovingTo: "g1"}}, "unfrozen or to itself"},
		{"moving to itself", []Shard{frozen(sh("", "", "g0"), "g0")}, "unfrozen or to itself"},
		{"two moving", []Shard{frozen(sh("", "f", "g0"), "g1"), frozen(sh("f", "", "g1"), "g0")}, "at most one"},
		{"frozen, not moving", []Shard{frozen(sh("", "", "g0"), "")}, ""},
	} {
		err := ShardMap{Version: 1, Shards: tc.shards}.Validate()
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

func TestMidpoint(t *testing.T) {
	for _, tc := range []struct {
		start, end, want []byte
	}{
		{nil, nil, []byte{0x80}},
		{[]byte{0x40}, []byte{0x80}, []byte{0x60}},
		{[]byte{0x80}, nil, []byte{0xc0}},
		{[]byte{0x01}, []byte{0x02}, []byte{0x01, 0x80}},
		{[]byte("a"), []byte("a\x00"), nil},
	} {
		got := Midpoint(tc.start, tc.end)
		if !bytes.Equal(got, tc.want) {
			t.Errorf("Midpoint(%q, %q) = %q, want %q", tc.start, tc.end, got, tc.want)
		}
	}
}

func TestPlanMove(t *testing.T) {
	m := ShardMap{Version: 1, Shards: []Shard{sh("", "\x80", "g0"), sh("\x80", "", "g1")}}
	for _, tc := range []struct {
		name   string
		m      ShardMap
		groups []string
		writes []float64
		ok     bool
		want   MovePlan
	}{
		{"balanced", m, []string{"g0", "g1"}, []float64{1000, 900}, false, MovePlan{}},
		{"too few writes", m, []string{"g0", "g1"}, []float64{50, 0}, false, MovePlan{}},
		// One hot shard and an idle group: moving it whole would only
		// move the heat, so its upper half goes.
		{"split the hot shard", m, []string{"g0", "g1"}, []float64{1000, 0}, true,
			MovePlan{Start: []byte{0x40}, End: []byte{0x80}, From: "g0", To: "g1"}},
		// A group with no shard is the idlest: g1's busiest shard moves
		// whole, since that narrows the gap.
		{"to an empty group", ShardMap{Version: 1, Shards: []Shard{sh("", "\x40", "g0"), sh("\x40", "\x80", "g1"), sh("\x80", "", "g1")}},
			[]string{"g0", "g1", "g2"}, []float64{300, 200, 500}, true,
			MovePlan{Start: []byte{0x80}, From: "g1", To: "g2"}},
		// Half the hot shard would make g1 as busy as g0 is now.
		{"the gap is too small to split", m, []string{"g0", "g1"}, []float64{1000, 500}, false, MovePlan{}},
		{"a smaller gap: half moves", m, []string{"g0", "g1"}, []float64{1000, 400}, true,
			MovePlan{Start: []byte{0x40}, End: []byte{0x80}, From: "g0", To: "g1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := PlanMove(tc.m, tc.groups, tc.writes, 2, 100)
			if ok != tc.ok {
				t.Fatalf("ok = %v, plan %+v", ok, p)
			}
			if !ok {
				return
			}
			p.Load = nil
			if !reflect.DeepEqual(p, tc.want) {
				t.Fatalf("plan %+v, want %+v", p, tc.want)
			}
		})
	}
}

func TestShardMapMovesOnEtcd(t *testing.T) {
	c := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := UniformShards([]string{"g0", "g1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateShardMap(ctx, m); err != nil {
		t.Fatal(err)
	}
	w := c.WatchShardMap(ctx)
	if got := <-w; got.Version != 1 {
		t.Fatalf("watch first: %+v", got)
	}
	b, ok, err := c.UpdateShardMap(ctx, func(cur ShardMap) (ShardMap, bool, error) {
		next, err := BeginMove(cur, []byte{0x40}, []byte{0x80}, "g1")
		return next, err == nil, err
	})
	if err != nil || !ok || b.Version != 2 {
		t.Fatalf("begin: %+v %v %v", b, ok, err)
	}
	if got := <-w; got.Version != 2 {
		t.Fatalf("watch begin: %+v", got)
	}
	// A change computed from a stale map loses the compare-and-swap and
	// is recomputed from the winner's: a second begin is refused.
	if _, _, err := c.UpdateShardMap(ctx, func(cur ShardMap) (ShardMap, bool, error) {
		next, err := BeginMove(cur, []byte{0x00}, []byte{0x10}, "g1")
		return next, err == nil, err
	}); err == nil {
		t.Fatal("a second move began")
	}
	if _, _, err := c.UpdateShardMap(ctx, func(cur ShardMap) (ShardMap, bool, error) {
		cur.Version += 2
		return cur, true, nil
	}); err == nil {
		t.Fatal("accepted a version jump")
	}
	reg, err := c.Register(ctx, Node{ID: "a", Addr: "x:1"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Put(ctx, c.ShardAckKey("a"), "2"); err != nil {
		t.Fatal(err)
	}
	if err := reg.Put(ctx, c.LoadKey("a"), `{"groups":{"g0":{"":7}}}`); err != nil {
		t.Fatal(err)
	}
	acks, err := c.ShardAcks(ctx)
	if err != nil || acks["a"] != 2 {
		t.Fatalf("acks: %v %v", acks, err)
	}
	loads, err := c.Loads(ctx)
	if err != nil || loads["a"].Groups["g0"][""] != 7 {
		t.Fatalf("loads: %+v %v", loads, err)
	}
	reg.Close() // the lease takes the ack and the load with it
	if acks, err := c.ShardAcks(ctx); err != nil || len(acks) != 0 {
		t.Fatalf("acks after close: %v %v", acks, err)
	}
}

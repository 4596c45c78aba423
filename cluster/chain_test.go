package cluster

import (
	"reflect"
	"testing"
)

func live(ids ...string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

func TestReconfigure(t *testing.T) {
	abc := Chain{Group: "g", Epoch: 7, Members: []string{"a", "b", "c"}}
	tests := []struct {
		name  string
		in    Chain
		live  map[string]bool
		cands []string
		want  Chain
		ev    []Event
	}{
		{"all alive: no change", abc, live("a", "b", "c"), []string{"a", "b", "c"}, abc, nil},
		{"dead head: successor is head", abc, live("b", "c"), nil,
			Chain{Group: "g", Epoch: 8, Members: []string{"b", "c"}}, []Event{{HeadFailed, "a"}}},
		{"dead middle: skipped", abc, live("a", "c"), nil,
			Chain{Group: "g", Epoch: 8, Members: []string{"a", "c"}}, []Event{{MiddleFailed, "b"}}},
		{"dead tail: predecessor is tail", abc, live("a", "b"), nil,
			Chain{Group: "g", Epoch: 8, Members: []string{"a", "b"}}, []Event{{TailFailed, "c"}}},
		{"head and tail dead at once", abc, live("b"), nil,
			Chain{Group: "g", Epoch: 8, Members: []string{"b"}}, []Event{{HeadFailed, "a"}, {TailFailed, "c"}}},
		{"every member dead: nothing removed", abc, live("d"), []string{"d"},
			Chain{Group: "g", Epoch: 8, Members: []string{"a", "b", "c"}, Joining: "d"}, []Event{{JoinStarted, "d"}}},
		{"every member dead, no candidate: no change", abc, live(), nil, abc, nil},
		{"new node starts joining", abc, live("a", "b", "c", "d"), []string{"a", "b", "c", "d"},
			Chain{Group: "g", Epoch: 8, Members: []string{"a", "b", "c"}, Joining: "d"}, []Event{{JoinStarted, "d"}}},
		{"one join at a time", Chain{Group: "g", Epoch: 8, Members: []string{"a"}, Joining: "d"}, live("a", "d", "e"), []string{"d", "e"},
			Chain{Group: "g", Epoch: 8, Members: []string{"a"}, Joining: "d"}, nil},
		{"dead joiner dropped, next starts", Chain{Group: "g", Epoch: 8, Members: []string{"a"}, Joining: "d"}, live("a", "e"), []string{"e"},
			Chain{Group: "g", Epoch: 9, Members: []string{"a"}, Joining: "e"}, []Event{{JoinerFailed, "d"}, {JoinStarted, "e"}}},
		{"failure and join in one step", abc, live("a", "c", "b2"), []string{"b2"},
			Chain{Group: "g", Epoch: 8, Members: []string{"a", "c"}, Joining: "b2"}, []Event{{MiddleFailed, "b"}, {JoinStarted, "b2"}}},
		{"empty chain: nobody to copy from", Chain{Group: "g", Epoch: 1}, live("a"), []string{"a"}, Chain{Group: "g", Epoch: 1}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in.Clone()
			got, ev := Reconfigure(tt.in, tt.live, tt.cands)
			if !reflect.DeepEqual(got, tt.want) || !reflect.DeepEqual(ev, tt.ev) {
				t.Fatalf("got %+v %v, want %+v %v", got, ev, tt.want, tt.ev)
			}
			if !reflect.DeepEqual(tt.in, in) {
				t.Fatalf("input changed: %+v", tt.in)
			}
			if err := got.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestPromoteRemove(t *testing.T) {
	c := Chain{Group: "g", Epoch: 3, Members: []string{"a", "b"}, Joining: "c"}
	p, ev, err := Promote(c, "c")
	if err != nil || !reflect.DeepEqual(p, Chain{Group: "g", Epoch: 4, Members: []string{"a", "b", "c"}}) || ev[0].Reason != Joined {
		t.Fatalf("promote: %+v %v %v", p, ev, err)
	}
	if _, _, err := Promote(c, "d"); err == nil {
		t.Fatal("promoted a node that was not joining")
	}
	if _, _, err := Promote(p, ""); err == nil {
		t.Fatal("promoted nobody")
	}
	for _, tt := range []struct {
		in   Chain
		id   string
		want Chain
	}{
		{c, "a", Chain{Group: "g", Epoch: 4, Members: []string{"b"}, Joining: "c"}},
		{c, "c", Chain{Group: "g", Epoch: 4, Members: []string{"a", "b"}}},
		{c, "x", c},
		{Chain{Group: "g", Epoch: 2, Members: []string{"a"}}, "a", Chain{Group: "g", Epoch: 2, Members: []string{"a"}}},
	} {
		if got, _ := Remove(tt.in, tt.id); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Remove(%+v, %s) = %+v, want %+v", tt.in, tt.id, got, tt.want)
		}
	}
}

func TestNeighbours(t *testing.T) {
	c := Chain{Group: "g", Epoch: 1, Members: []string{"a", "b", "c"}, Joining: "d"}
	for _, tt := range []struct {
		id, pred, succ string
		member         bool
	}{{"a", "", "b", true}, {"b", "a", "c", true}, {"c", "b", "d", true}, {"d", "", "", false}} {
		p, s, m := c.Neighbours(tt.id)
		if p != tt.pred || s != tt.succ || m != tt.member {
			t.Errorf("%s: %q %q %v", tt.id, p, s, m)
		}
	}
}

func TestDecodeChainRejects(t *testing.T) {
	for _, b := range []string{
		`{`, `{"epoch":1,"members":["a"]}`, `{"group":"g","members":["a","a"]}`,
		`{"group":"g","members":["a",""]}`, `{"group":"g","members":["a"],"joining":"a"}`,
	} {
		if _, err := DecodeChain([]byte(b)); err == nil {
			t.Errorf("accepted %s", b)
		}
	}
	c := Chain{Group: "g", Epoch: 5, Members: []string{"a", "b"}, Joining: "c"}
	b, err := EncodeChain(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeChain(b); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
}

func FuzzDecodeChain(f *testing.F) {
	f.Add([]byte(`{"group":"g","epoch":3,"members":["a","b"],"joining":"c"}`))
	f.Add([]byte(`{"group":"g","members":["a","a"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeChain(b)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("decoded an invalid chain: %v", err)
		}
		b2, err := EncodeChain(c)
		if err != nil {
			t.Fatal(err)
		}
		if c2, err := DecodeChain(b2); err != nil || !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip: %+v %+v %v", c, c2, err)
		}
	})
}

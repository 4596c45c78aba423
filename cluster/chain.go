package cluster

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Chain is the configuration of one replication group: its members in
// chain order and the epoch that names this configuration.
//
// Invariants (checked by Validate, kept by every function here):
//   - Epoch grows by exactly one on every change, so two different
//     configurations of a group never share an epoch and a node or client
//     holding epoch e knows it is stale when it meets e' > e.
//   - Members holds distinct node IDs, the head first and the tail last.
//   - Joining, if set, is not a member: it is the node being copied to
//     (COPY) before it is appended as the new tail by Promote.
type Chain struct {
	Group   string   `json:"group"`
	Epoch   uint64   `json:"epoch"`
	Members []string `json:"members"`
	Joining string   `json:"joining,omitempty"`
}

// Head returns the first member ("" for an empty chain).
func (c Chain) Head() string {
	if len(c.Members) == 0 {
		return ""
	}
	return c.Members[0]
}

// Tail returns the last member ("" for an empty chain).
func (c Chain) Tail() string {
	if len(c.Members) == 0 {
		return ""
	}
	return c.Members[len(c.Members)-1]
}

// Neighbours returns id's predecessor and successor in the chain ("" at
// the ends) and whether id is a member. The tail's successor for write
// shipping is the joining node, if any: it receives every write the tail
// applies while it is being copied to.
func (c Chain) Neighbours(id string) (pred, succ string, member bool) {
	i := slices.Index(c.Members, id)
	if i < 0 {
		return "", "", false
	}
	if i > 0 {
		pred = c.Members[i-1]
	}
	if i+1 < len(c.Members) {
		succ = c.Members[i+1]
	} else {
		succ = c.Joining
	}
	return pred, succ, true
}

// Clone returns a copy that shares no slice with c.
func (c Chain) Clone() Chain {
	c.Members = slices.Clone(c.Members)
	return c
}

// Validate checks the invariants of a configuration read from etcd.
func (c Chain) Validate() error {
	if c.Group == "" {
		return fmt.Errorf("cluster: chain has no group")
	}
	seen := make(map[string]bool, len(c.Members))
	for _, m := range c.Members {
		if m == "" {
			return fmt.Errorf("cluster: chain %s epoch %d: empty member ID", c.Group, c.Epoch)
		}
		if seen[m] {
			return fmt.Errorf("cluster: chain %s epoch %d: member %q twice", c.Group, c.Epoch, m)
		}
		seen[m] = true
	}
	if c.Joining != "" && seen[c.Joining] {
		return fmt.Errorf("cluster: chain %s epoch %d: joining node %q is already a member", c.Group, c.Epoch, c.Joining)
	}
	return nil
}

// EncodeChain returns the etcd value of c (JSON).
func EncodeChain(c Chain) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// DecodeChain parses and validates an etcd value written by EncodeChain.
func DecodeChain(b []byte) (Chain, error) {
	var c Chain
	if err := json.Unmarshal(b, &c); err != nil {
		return Chain{}, fmt.Errorf("cluster: decode chain: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Chain{}, err
	}
	return c, nil
}

// Reason names one step of a reconfiguration.
type Reason string

// The reasons Reconfigure, Promote and Remove report.
const (
	HeadFailed   Reason = "head failed: its successor becomes head"
	MiddleFailed Reason = "middle node failed: it is skipped"
	TailFailed   Reason = "tail failed: its predecessor becomes tail"
	JoinerFailed Reason = "joining node failed: the join is abandoned"
	JoinStarted  Reason = "node joins: COPY to it from the tail"
	Joined       Reason = "joined node becomes the tail"
	Left         Reason = "node left"
)

// Event is one step of a reconfiguration, for logs and tests.
type Event struct {
	Reason Reason
	Node   string
}

// Reconfigure is the control plane's decision, a pure function: given the
// current configuration, which nodes hold a live lease, and the live nodes
// that serve the group but are not in the chain (candidates, in the order
// they should join), it returns the next configuration and what changed.
// No change: the same chain (same epoch) and no events.
//
// Rules:
//   - A dead member is removed and the order of the others kept: a dead
//     head's successor becomes head, a dead tail's predecessor becomes
//     tail, a dead middle node is skipped. If every member is dead nothing
//     is removed: no live node holds the group's data, and removing the
//     last would lose it; the chain waits for a member to come back.
//   - A dead joining node is dropped.
//   - With no join in progress, the first candidate starts joining; it
//     becomes a member only through Promote, after its COPY.
func Reconfigure(c Chain, live map[string]bool, candidates []string) (Chain, []Event) {
	next := c.Clone()
	var ev []Event
	alive := 0
	for _, m := range c.Members {
		if live[m] {
			alive++
		}
	}
	if alive > 0 && alive < len(c.Members) {
		next.Members = next.Members[:0]
		for i, m := range c.Members {
			if live[m] {
				next.Members = append(next.Members, m)
				continue
			}
			switch {
			case i == 0:
				ev = append(ev, Event{HeadFailed, m})
			case i == len(c.Members)-1:
				ev = append(ev, Event{TailFailed, m})
			default:
				ev = append(ev, Event{MiddleFailed, m})
			}
		}
	}
	if next.Joining != "" && !live[next.Joining] {
		ev = append(ev, Event{JoinerFailed, next.Joining})
		next.Joining = ""
	}
	if next.Joining == "" && len(next.Members) > 0 {
		for _, n := range candidates {
			if live[n] && !slices.Contains(next.Members, n) {
				next.Joining = n
				ev = append(ev, Event{JoinStarted, n})
				break
			}
		}
	}
	if len(ev) == 0 {
		return c, nil
	}
	next.Epoch++
	return next, ev
}

// Promote makes the joining node id the new tail, once its COPY is done
// and it holds every write the chain acknowledged. It fails if id is not
// the node joining in c.
func Promote(c Chain, id string) (Chain, []Event, error) {
	if c.Joining != id || id == "" {
		return c, nil, fmt.Errorf("cluster: chain %s epoch %d: %q is not joining (joining: %q)", c.Group, c.Epoch, id, c.Joining)
	}
	next := c.Clone()
	next.Members = append(next.Members, id)
	next.Joining = ""
	next.Epoch++
	return next, []Event{{Joined, id}}, nil
}

// Remove takes id out of the chain (as a member or as the joining node),
// as a node does to itself when it starts again: what it held may be
// behind the chain, so it rejoins through COPY. The last member is never
// removed (it alone holds the group's data); Remove then reports no
// change and the node keeps its state.
func Remove(c Chain, id string) (Chain, []Event) {
	next := c.Clone()
	switch {
	case c.Joining == id:
		next.Joining = ""
	case slices.Contains(c.Members, id) && len(c.Members) > 1:
		next.Members = slices.DeleteFunc(next.Members, func(m string) bool { return m == id })
	default:
		return c, nil
	}
	next.Epoch++
	return next, []Event{{Left, id}}
}

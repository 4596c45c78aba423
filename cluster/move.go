package cluster

import (
	"bytes"
	"fmt"
	"math/big"
	"slices"
)

// Moving a key range between groups takes three map versions, each one
// compare-and-swap (kv/chain.MoveRange runs them and the copies between):
//
//	BeginMove   the range becomes one shard, frozen, MovingTo the new group:
//	            no group takes client writes to it, the old group still
//	            serves its reads, the new group takes the copy's writes.
//	SwitchMove  the new group owns it, still frozen: reads go there, and
//	            no write happens anywhere while nodes learn the switch.
//	EndMove     thawed: writes go to the new group.
//
// AbortMove undoes a BeginMove whose copy failed.

// CanWrite reports whether group may apply a client's write of key under
// the map: it owns the key's shard and the shard is not frozen, or the
// shard is moving to it (the move's copy).
func (m ShardMap) CanWrite(group string, key []byte) bool {
	s := m.Shards[m.Lookup(key)]
	return (s.Group == group && !s.Frozen) || s.MovingTo == group
}

// CanRead reports whether group serves reads of key: it owns the key's
// shard (frozen or not).
func (m ShardMap) CanRead(group string, key []byte) bool {
	return m.Shards[m.Lookup(key)].Group == group
}

// CanScan reports whether group may scan [start, end) (end nil: no bound):
// every shard it overlaps is the group's or moving to it.
func (m ShardMap) CanScan(group string, start, end []byte) bool {
	for i := m.Lookup(start); i < len(m.Shards); i++ {
		s := m.Shards[i]
		if end != nil && bytes.Compare(s.Start, end) >= 0 {
			break
		}
		if s.Group != group && s.MovingTo != group {
			return false
		}
	}
	return true
}

// Equal reports whether the shard is exactly [start, end) (end nil or
// empty: no bound).
func (s Shard) Equal(start, end []byte) bool {
	return bytes.Equal(s.Start, start) && bytes.Equal(s.End, end)
}

// Moving returns the shard being moved, if any.
func (m ShardMap) Moving() (Shard, bool) {
	for _, s := range m.Shards {
		if s.MovingTo != "" {
			return s, true
		}
	}
	return Shard{}, false
}

// splitAt makes key a shard boundary (a no-op if it is one, or is empty).
func (m *ShardMap) splitAt(key []byte) {
	if len(key) == 0 {
		return
	}
	i := m.Lookup(key)
	s := m.Shards[i]
	if bytes.Equal(s.Start, key) {
		return
	}
	lo, hi := s, s
	lo.End, hi.Start = slices.Clone(key), slices.Clone(key)
	m.Shards = slices.Replace(m.Shards, i, i+1, lo, hi)
}

// merge joins neighbouring shards of one group that are neither frozen
// nor moving, so moves back and forth do not fragment the map.
func (m *ShardMap) merge() {
	out := m.Shards[:1]
	for _, s := range m.Shards[1:] {
		p := &out[len(out)-1]
		if p.Group == s.Group && !p.Frozen && !s.Frozen {
			p.End = s.End
			continue
		}
		out = append(out, s)
	}
	m.Shards = out
}

// BeginMove returns the map (next version) in which [start, end) (end
// nil: no bound) is one frozen shard moving to group to. The range must
// be held by one group other than to, none of it frozen, and no other
// move may be running.
func BeginMove(m ShardMap, start, end []byte, to string) (ShardMap, error) {
	if end != nil && bytes.Compare(start, end) >= 0 {
		return m, fmt.Errorf("cluster: move of [%q, %q): empty range", start, end)
	}
	if to == "" {
		return m, fmt.Errorf("cluster: move of [%q, %q) to no group", start, end)
	}
	if s, ok := m.Moving(); ok {
		return m, fmt.Errorf("cluster: shard map version %d: [%q, %q) is already moving to %s", m.Version, s.Start, s.End, s.MovingTo)
	}
	next := m.Clone()
	next.splitAt(start)
	next.splitAt(end)
	i := next.Lookup(start)
	j := len(next.Shards) // shards i..j-1 are the range
	if end != nil {
		j = next.Lookup(end)
	}
	from := next.Shards[i].Group
	for _, s := range next.Shards[i:j] {
		if s.Group != from || s.Frozen {
			return m, fmt.Errorf("cluster: shard map version %d: [%q, %q) is not one unfrozen group's (%s, then %s frozen=%v)", m.Version, start, end, from, s.Group, s.Frozen)
		}
	}
	if from == to {
		return m, fmt.Errorf("cluster: [%q, %q) is group %s's already", start, end, to)
	}
	moving := Shard{Start: next.Shards[i].Start, End: next.Shards[j-1].End, Group: from, Frozen: true, MovingTo: to}
	next.Shards = slices.Replace(next.Shards, i, j, moving)
	next.Version++
	return next, next.Validate()
}

// SwitchMove returns the map (next version) in which the moving shard is
// its new group's, still frozen.
func SwitchMove(m ShardMap) (ShardMap, error) {
	next := m.Clone()
	for i, s := range next.Shards {
		if s.MovingTo != "" {
			next.Shards[i].Group, next.Shards[i].MovingTo = s.MovingTo, ""
			next.Version++
			return next, next.Validate()
		}
	}
	return m, fmt.Errorf("cluster: shard map version %d: no shard is moving", m.Version)
}

// EndMove returns the map (next version) in which the switched shard
// starting at start is thawed (and merged with its group's neighbours).
func EndMove(m ShardMap, start []byte) (ShardMap, error) {
	next := m.Clone()
	i := next.Lookup(start)
	if s := next.Shards[i]; !bytes.Equal(s.Start, start) || !s.Frozen || s.MovingTo != "" {
		return m, fmt.Errorf("cluster: shard map version %d: no switched shard starts at %q", m.Version, start)
	}
	next.Shards[i].Frozen = false
	next.merge()
	next.Version++
	return next, next.Validate()
}

// AbortMove returns the map (next version) in which the moving shard is
// thawed and stays with its group.
func AbortMove(m ShardMap) (ShardMap, error) {
	next := m.Clone()
	for i, s := range next.Shards {
		if s.MovingTo != "" {
			next.Shards[i].MovingTo, next.Shards[i].Frozen = "", false
			next.merge()
			next.Version++
			return next, next.Validate()
		}
	}
	return m, fmt.Errorf("cluster: shard map version %d: no shard is moving", m.Version)
}

// Midpoint returns a key strictly between start and end (end nil: the
// end of the key space), halfway as fractions of the key space, or nil
// if there is none (end is start followed by zero bytes only).
func Midpoint(start, end []byte) []byte {
	n := max(len(start), len(end)) + 1
	num := func(k []byte) *big.Int {
		p := make([]byte, n)
		copy(p, k)
		return new(big.Int).SetBytes(p)
	}
	lo := num(start)
	hi := new(big.Int).Lsh(big.NewInt(1), uint(8*n))
	if end != nil {
		hi = num(end)
	}
	mid := new(big.Int).Add(lo, hi)
	mid.Rsh(mid, 1)
	if mid.Cmp(lo) <= 0 {
		return nil
	}
	b := mid.FillBytes(make([]byte, n))
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	if bytes.Compare(b, start) <= 0 || (end != nil && bytes.Compare(b, end) >= 0) {
		return nil
	}
	return b
}

// MovePlan is a balancing decision: move [Start, End) from group From to
// group To.
type MovePlan struct {
	Start, End []byte
	From, To   string
	// Load is the groups' writes in the window the plan was made from.
	Load map[string]float64
}

// PlanMove is write-imbalance handling's decision, a pure function, as
// LEED swaps data from an overloaded device to an underloaded one: given
// the map, every group (some may hold no shard) and the writes each shard
// took in a window (writes[i] for m.Shards[i]), it picks the group with
// the most writes (hot) and the one with the fewest (cold). If hot took
// at least minWrites and ratio times cold's, it moves hot's busiest shard
// to cold — whole if that narrows the gap, else its upper half by key
// (writes spread evenly over it, as hashed keys do) — and only if the
// move lowers the busiest group's load. No move while one is running.
func PlanMove(m ShardMap, groups []string, writes []float64, ratio, minWrites float64) (MovePlan, bool) {
	if len(writes) != len(m.Shards) || len(groups) < 2 {
		return MovePlan{}, false
	}
	if _, moving := m.Moving(); moving {
		return MovePlan{}, false
	}
	load := make(map[string]float64, len(groups))
	for _, g := range groups {
		load[g] = 0
	}
	for i, s := range m.Shards {
		load[s.Group] += writes[i]
	}
	gs := slices.Sorted(func(yield func(string) bool) {
		for g := range load {
			if !yield(g) {
				return
			}
		}
	})
	hot, cold := gs[0], gs[0]
	for _, g := range gs {
		if load[g] > load[hot] {
			hot = g
		}
		if load[g] < load[cold] {
			cold = g
		}
	}
	gap := load[hot] - load[cold]
	none := MovePlan{Load: load}
	if hot == cold || load[hot] < minWrites || load[hot] < ratio*load[cold] {
		return none, false
	}
	best := -1
	for i, s := range m.Shards {
		if s.Group == hot && !s.Frozen && (best < 0 || writes[i] > writes[best]) {
			best = i
		}
	}
	if best < 0 || writes[best] <= 0 {
		return none, false
	}
	s := m.Shards[best]
	p := MovePlan{Start: slices.Clone(s.Start), End: slices.Clone(s.End), From: hot, To: cold, Load: load}
	if len(s.End) == 0 {
		p.End = nil
	}
	if w := writes[best]; w >= gap {
		mid := Midpoint(s.Start, p.End)
		if mid == nil || w/2 >= gap {
			return none, false
		}
		p.Start = mid
	}
	return p, true
}

package chain

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nearstore/nearstore/cluster"
)

// MoveConfig configures MoveRange.
type MoveConfig struct {
	Control *cluster.Control
	// Start and End bound the range [Start, End) (End nil: no bound); it
	// must be held by one group other than To.
	Start, End []byte
	To         string
	// Workers is how many copy writes are in flight (default 16).
	Workers int
	Log     *slog.Logger
}

// MoveStats is what a move did.
type MoveStats struct {
	From string
	// Copied is the keys copied to the new group; Cleared the keys the
	// new group held in the range beforehand (left from an earlier
	// ownership) and deleted before the copy.
	Copied, Cleared int
	// Versions are the shard map versions of the begin, switch and end.
	Versions [3]uint64
	// Frozen is how long client writes to the range waited.
	Frozen time.Duration
}

// MoveRange moves [Start, End) to group To, as LEED moves data between
// devices: a COPY of the range to the new member, then a switch in etcd.
//
//  1. cluster.BeginMove (one compare-and-swap): the range is frozen and
//     moving. MoveRange waits until every live node has acknowledged the
//     map (cluster.Control.ShardAcks): each then refuses client writes to
//     the range, and every write it took before is committed, so the old
//     group's tail holds the range's final contents.
//  2. COPY: the new group deletes what it held in the range, then every
//     key of the range is read at the old group's tail and written
//     through the new group's chain (each copy write is on every member
//     of the new chain when it returns).
//  3. cluster.SwitchMove: the new group owns the range, still frozen, so
//     no write happens while nodes learn it; MoveRange waits for every
//     node's acknowledgement again, after which the old group refuses
//     reads of the range (no stale read from it).
//  4. cluster.EndMove: thawed. Client writes that arrived during the move
//     were refused with codes.OutOfRange and retried by their Router; they
//     now go to the new group. None is lost: no write to the range is
//     acknowledged by anyone between steps 1 and 4.
//
// A failure before the switch undoes the begin (cluster.AbortMove); the
// new group's partial copy is unreachable and cleared by the next move
// into it. A move its mover left unfinished (the process died) is resumed
// by calling MoveRange again with the same range and group: before the
// switch the copy is redone, after it only the end; AbortMove undoes one
// that has not switched.
// The old group's copy of the range stays on its devices, unreachable.
func MoveRange(ctx context.Context, cfg MoveConfig) (MoveStats, error) {
	var st MoveStats
	if cfg.Control == nil || cfg.To == "" {
		return st, fmt.Errorf("chain: a move needs a control plane and a group to move to")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 16
	}
	lg := cfg.logger()
	if _, err := cfg.Control.Chain(ctx, cfg.To); err != nil {
		return st, fmt.Errorf("chain: move to %s: %w", cfg.To, err)
	}
	// A move of this range to this group that a mover left unfinished
	// (it died, or its context ended) is resumed where the map says it
	// stands: the copy is redone whole (clearing first), the switch kept.
	var switched bool
	m, _, err := cfg.Control.UpdateShardMap(ctx, func(cur cluster.ShardMap) (cluster.ShardMap, bool, error) {
		if s, ok := cur.Moving(); ok && s.MovingTo == cfg.To && s.Equal(cfg.Start, cfg.End) {
			return cur, false, nil
		}
		if s := cur.Shards[cur.Lookup(cfg.Start)]; s.Frozen && s.MovingTo == "" && s.Group == cfg.To && s.Equal(cfg.Start, cfg.End) {
			switched = true
			return cur, false, nil
		}
		next, err := cluster.BeginMove(cur, cfg.Start, cfg.End, cfg.To)
		return next, err == nil, err
	})
	if err != nil {
		return st, fmt.Errorf("chain: begin move: %w", err)
	}
	frozenAt := time.Now()
	if switched {
		lg.Info("move: resuming after its switch", "start", cfg.Start, "end", cfg.End, "to", cfg.To, "version", m.Version)
		return endMove(ctx, cfg, m, cfg.Start, st, frozenAt)
	}
	sh, _ := m.Moving()
	st.From, st.Versions[0] = sh.Group, m.Version
	lg.Info("move: begun", "start", sh.Start, "end", sh.End, "from", sh.Group, "to", cfg.To, "version", m.Version)
	if err := copyRange(ctx, cfg, sh, &st); err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, aerr := AbortMove(actx, cfg.Control); aerr != nil {
			err = errors.Join(err, fmt.Errorf("abort: %w", aerr))
		}
		return st, fmt.Errorf("chain: move [%q, %q) to %s: %w", sh.Start, sh.End, cfg.To, err)
	}
	m, _, err = cfg.Control.UpdateShardMap(ctx, func(cur cluster.ShardMap) (cluster.ShardMap, bool, error) {
		next, err := cluster.SwitchMove(cur)
		return next, err == nil, err
	})
	if err != nil {
		return st, fmt.Errorf("chain: switch move: %w", err)
	}
	return endMove(ctx, cfg, m, sh.Start, st, frozenAt)
}

// endMove is steps 3 and 4 of MoveRange once the switch is in map m:
// every node acknowledges it, then the range thaws.
func endMove(ctx context.Context, cfg MoveConfig, m cluster.ShardMap, start []byte, st MoveStats, frozenAt time.Time) (MoveStats, error) {
	st.Versions[1] = m.Version
	if err := WaitAcks(ctx, cfg.Control, m.Version); err != nil {
		return st, fmt.Errorf("chain: switched (version %d), not yet ended (run the move again to end it): %w", m.Version, err)
	}
	m, _, err := cfg.Control.UpdateShardMap(ctx, func(cur cluster.ShardMap) (cluster.ShardMap, bool, error) {
		next, err := cluster.EndMove(cur, start)
		return next, err == nil, err
	})
	if err != nil {
		return st, fmt.Errorf("chain: end move: %w", err)
	}
	st.Versions[2], st.Frozen = m.Version, time.Since(frozenAt)
	cfg.logger().Info("move: done", "start", start, "from", st.From, "to", cfg.To, "copied", st.Copied, "cleared", st.Cleared, "frozen", st.Frozen, "version", m.Version)
	return st, nil
}

func (cfg MoveConfig) logger() *slog.Logger {
	if cfg.Log == nil {
		return slog.Default()
	}
	return cfg.Log
}

// AbortMove undoes a move that has not switched (cluster.AbortMove): the
// range thaws and stays with its group. For a move whose mover died
// before the switch; running the move again resumes it instead.
func AbortMove(ctx context.Context, ctl *cluster.Control) (cluster.ShardMap, error) {
	m, _, err := ctl.UpdateShardMap(ctx, func(cur cluster.ShardMap) (cluster.ShardMap, bool, error) {
		next, err := cluster.AbortMove(cur)
		return next, err == nil, err
	})
	return m, err
}

// copyRange is step 2 of MoveRange, once every node enforces the begin.
func copyRange(ctx context.Context, cfg MoveConfig, sh cluster.Shard, st *MoveStats) error {
	if err := WaitAcks(ctx, cfg.Control, st.Versions[0]); err != nil {
		return err
	}
	end := sh.End
	if len(end) == 0 {
		end = nil
	}
	src, err := NewClient(ctx, ClientConfig{Control: cfg.Control, Group: sh.Group, Reads: ReadTail})
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := NewClient(ctx, ClientConfig{Control: cfg.Control, Group: cfg.To, Reads: ReadTail})
	if err != nil {
		return err
	}
	defer dst.Close()
	st.Cleared, err = pagedApply(ctx, cfg.Workers, dst, sh.Start, end, func(ctx context.Context, kv KV) error {
		return dst.Delete(ctx, kv.Key)
	})
	if err != nil {
		return fmt.Errorf("clear %s: %w", cfg.To, err)
	}
	st.Copied, err = pagedApply(ctx, cfg.Workers, src, sh.Start, end, func(ctx context.Context, kv KV) error {
		return dst.Put(ctx, kv.Key, kv.Value)
	})
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", sh.Group, cfg.To, err)
	}
	return nil
}

// pagedApply scans [start, end) at c's tail a page at a time and runs fn
// on every key, workers at once; it returns how many keys it did.
func pagedApply(ctx context.Context, workers int, c *Client, start, end []byte, fn func(context.Context, KV) error) (int, error) {
	n := 0
	from := start
	for {
		page, err := c.Scan(ctx, from, end, MaxScan)
		if err != nil {
			return n, err
		}
		if len(page) == 0 {
			return n, nil
		}
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			first error
		)
		next := make(chan KV)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for kv := range next {
					if err := fn(ctx, kv); err != nil {
						mu.Lock()
						if first == nil {
							first = err
						}
						mu.Unlock()
					}
				}
			}()
		}
		for _, kv := range page {
			next <- kv
		}
		close(next)
		wg.Wait()
		if first != nil {
			return n, first
		}
		n += len(page)
		if len(page) < MaxScan {
			return n, nil
		}
		from = append(bytes.Clone(page[len(page)-1].Key), 0)
	}
}

// WaitAcks returns once every live node has acknowledged shard map
// version v or a later one (a node that dies meanwhile stops counting
// when its lease expires): from then on every node enforces it.
func WaitAcks(ctx context.Context, ctl *cluster.Control, v uint64) error {
	for {
		nodes, err := ctl.Nodes(ctx)
		if err != nil {
			return err
		}
		acks, err := ctl.ShardAcks(ctx)
		if err != nil {
			return err
		}
		var behind []string
		for id := range nodes {
			if acks[id] < v {
				behind = append(behind, id)
			}
		}
		if len(behind) == 0 {
			return nil
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("nodes %v have not acknowledged shard map version %d: %w", behind, v, err)
		}
	}
}

// BalanceConfig configures Balance.
type BalanceConfig struct {
	Control *cluster.Control
	// Window is how long writes are counted (default 5s).
	Window time.Duration
	// Ratio and MinWrites trigger a move (cluster.PlanMove): the busiest
	// group took at least MinWrites in the window and Ratio times the
	// idlest group's writes (defaults 2 and 100).
	Ratio, MinWrites float64
	Log              *slog.Logger
}

// Balance is write-imbalance handling, once: it measures each shard's
// client writes over the window (the heads' counters, published in etcd
// by every host), plans a move from the busiest group to the idlest
// (cluster.PlanMove), and runs it (MoveRange). It returns the plan and
// whether one was made.
func Balance(ctx context.Context, cfg BalanceConfig) (cluster.MovePlan, bool, MoveStats, error) {
	if cfg.Window <= 0 {
		cfg.Window = 5 * time.Second
	}
	if cfg.Ratio <= 0 {
		cfg.Ratio = 2
	}
	if cfg.MinWrites <= 0 {
		cfg.MinWrites = 100
	}
	m, writes, err := MeasureWrites(ctx, cfg.Control, cfg.Window)
	if err != nil {
		return cluster.MovePlan{}, false, MoveStats{}, err
	}
	groups, err := cfg.Control.Groups(ctx)
	if err != nil {
		return cluster.MovePlan{}, false, MoveStats{}, err
	}
	p, ok := cluster.PlanMove(m, groups, writes, cfg.Ratio, cfg.MinWrites)
	if !ok {
		return p, false, MoveStats{}, nil
	}
	st, err := MoveRange(ctx, MoveConfig{Control: cfg.Control, Start: p.Start, End: p.End, To: p.To, Log: cfg.Log})
	return p, true, st, err
}

// MeasureWrites returns the shard map and the client writes each of its
// shards took over window, from the hosts' counters in etcd (each count
// is a head's, per shard start; a count whose start is no longer a
// shard's is the shard's that holds it).
func MeasureWrites(ctx context.Context, ctl *cluster.Control, window time.Duration) (cluster.ShardMap, []float64, error) {
	before, err := ctl.Loads(ctx)
	if err != nil {
		return cluster.ShardMap{}, nil, err
	}
	if err := sleepCtx(ctx, window+LoadInterval); err != nil {
		return cluster.ShardMap{}, nil, err
	}
	after, err := ctl.Loads(ctx)
	if err != nil {
		return cluster.ShardMap{}, nil, err
	}
	m, err := ctl.ShardMap(ctx)
	if err != nil {
		return cluster.ShardMap{}, nil, err
	}
	writes := make([]float64, len(m.Shards))
	for node, l := range after {
		for g, counts := range l.Groups {
			for start, n := range counts {
				prev := before[node].Groups[g][start] // a counter is new, or it only grew
				key, err := hex.DecodeString(start)
				if err != nil || n < prev {
					continue
				}
				writes[m.Lookup(key)] += float64(n - prev)
			}
		}
	}
	return m, writes, nil
}

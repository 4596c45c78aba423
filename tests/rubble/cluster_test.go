package rubble_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/clustertest"
	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/rubble"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

func TestMain(m *testing.M) { clitest.Main(m) }

// rubbleArgs run each node with --store rubble: small memtables, so a
// few thousand writes flush and compact many times, and small pools; a
// 5 s lease, so a node on a loaded machine does not lose it (and rejoin
// by COPY, as a local replica) while the test checks the secondaries.
var rubbleArgs = []string{"--store", "rubble", "--memtable-size", "32768", "--rubble-size", "256MiB",
	"--rubble-slots", "64", "--rubble-slot-size", "1048576", "--stats-interval", "300ms", "--lease-ttl", "5"}

var statRE = regexp.MustCompile(`(\w+)=(\S+)`)

// stats parses node id's last stats line of the group.
func stats(c *clustertest.Cluster, id string) map[string]string {
	out := map[string]string{}
	for _, m := range statRE.FindAllStringSubmatch(c.Last(id, "stats", "group="+clustertest.Group), -1) {
		out[m[1]] = m[2]
	}
	return out
}

func num(t *testing.T, st map[string]string, k string) int {
	t.Helper()
	n, err := strconv.Atoi(st[k])
	if err != nil {
		t.Fatalf("stats field %s: %q (%v) in %v", k, st[k], err, st)
	}
	return n
}

// waitStats waits (generously) until ok holds for node id's stats.
func waitStats(t *testing.T, c *clustertest.Cluster, id, what string, ok func(map[string]string) bool) map[string]string {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		st := stats(c, id)
		if len(st) > 0 && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s never showed %s: %v", id, what, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRubbleKillNodeUnderLoad runs a RubbleDB group of three node
// processes (each a target exporting its volume with its slot pool):
// under a load of checked writes the head flushes and compacts and ships
// its tables into the others' pools over NVMe/TCP, and they install them
// without flushing or compacting. Then the head, a middle node or the
// tail is killed with SIGKILL under load (clustertest.KillUnderLoad:
// the chain reconfigures through etcd, every acknowledged write is read
// from the new tail, the killed node restarts, rejoins by COPY and
// serves the same data); a new head ships as primary; at the end every
// node's pool passes fsck.
func TestRubbleKillNodeUnderLoad(t *testing.T) {
	for _, v := range clustertest.Victims() {
		t.Run(v.Name, func(t *testing.T) {
			ids := []string{"n1", "n2", "n3"}
			c := clustertest.NewClusterWith(t, rubbleArgs, ids...)
			writer := c.Client(t, chain.ReadCRRS)
			tail := c.Client(t, chain.ReadTail)

			// Shipping: the head flushes and compacts, the others only
			// install what it ships.
			before := c.WaitChain(func(cluster.Chain) bool { return true })
			warm := clustertest.StartLoad(t, writer, tail)
			warm.WaitAcked(t, 3000)
			head := before.Head()
			waitStats(t, c, head, "compactions as primary", func(st map[string]string) bool {
				return st["mode"] == "primary" && num(t, st, "compactions") > 0 && num(t, st, "shipped_edits") > 0
			})
			acked := warm.Finish()
			for _, id := range before.Members[1:] {
				st := waitStats(t, c, id, "installed edits", func(st map[string]string) bool { return num(t, st, "installed") > 0 })
				if st["mode"] != "secondary" || num(t, st, "flushes") != 0 || num(t, st, "compactions") != 0 {
					t.Fatalf("secondary %s flushed or compacted, or is not a secondary: %v", id, st)
				}
			}
			t.Logf("before the kill: head %s: %s", head, c.Last(head, "stats", "group="+clustertest.Group))

			clustertest.KillUnderLoad(t, c, v.Name, v.Pick)

			// The (possibly new) head ships as primary.
			now := c.WaitChain(func(cluster.Chain) bool { return true })
			first := num(t, waitStats(t, c, now.Head(), "a stats line", func(map[string]string) bool { return true }), "shipped_edits")
			more := clustertest.StartLoad(t, writer, tail)
			more.WaitAcked(t, 2000)
			st := waitStats(t, c, now.Head(), "more shipped edits", func(st map[string]string) bool {
				return st["mode"] == "primary" && num(t, st, "shipped_edits") > first
			})
			t.Logf("after: chain %v; head %s: %v", now.Members, now.Head(), st)
			// The restarted node joined by COPY and compacted for
			// itself; under the load the primary resyncs it, and every
			// other member is a secondary again.
			for _, id := range now.Members[1:] {
				waitStats(t, c, id, "the secondary's role", func(st map[string]string) bool { return st["mode"] == "secondary" })
				t.Logf("node %s: %s", id, c.Last(id, "stats", "group="+clustertest.Group))
			}
			for k, v := range more.Finish() {
				acked[k] = v
			}
			clustertest.CheckAll(t, tail, acked)

			c.KillAll()
			for _, id := range ids {
				fsckPool(t, filepath.Join(c.Dir, id))
			}
		})
	}
}

// fsckPool mounts a killed node's volume (read-only: the journal is
// replayed in memory) and checks the group's pool.
func fsckPool(t *testing.T, data string) {
	t.Helper()
	ctx := context.Background()
	vol, err := volume.Open("file:" + filepath.Join(data, "rubble.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	fsys, err := offloadfs.MountReadOnly(ctx, offloadfs.VolumeDevice(vol), offloadfs.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("%s: mount: %v", data, err)
	}
	defer fsys.Close()
	p, err := rubble.OpenPoolAt(ctx, fsys, clustertest.Group+"/slots")
	if err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	if err := p.Check(ctx); err != nil {
		t.Fatalf("%s: fsck: %v", data, err)
	}
	if n := len(p.Slots()); n != 64 {
		t.Fatalf("%s: pool has %d slots, made with 64", data, n)
	}
	t.Logf("%s: pool of %d slots clean", filepath.Base(data), len(p.Slots()))
}

// TestRubbleFallback forces the fallback (--rubble-fallback): the
// primary's first edit is preceded by the fallback record, after which
// every replica flushes and compacts for itself and nothing is shipped;
// the group then survives its head's SIGKILL under load as a plain
// replicated kv/lsm, losing no acknowledged write.
func TestRubbleFallback(t *testing.T) {
	c := clustertest.NewClusterWith(t, append(slices.Clone(rubbleArgs), "--rubble-fallback"), "n1", "n2", "n3")
	writer := c.Client(t, chain.ReadCRRS)
	tail := c.Client(t, chain.ReadTail)
	ch := c.WaitChain(func(cluster.Chain) bool { return true })
	l := clustertest.StartLoad(t, writer, tail)
	l.WaitAcked(t, 3000)
	for _, id := range ch.Members {
		want := "local"
		if id == ch.Head() {
			want = "primary"
		}
		st := waitStats(t, c, id, "the fallback with flushes and compactions", func(st map[string]string) bool {
			return st["fell_back"] == "true" && num(t, st, "flushes") > 0
		})
		if st["mode"] != want || num(t, st, "shipped_edits") != 0 || num(t, st, "installed") != 0 {
			t.Fatalf("node %s in the fallback: %v; want mode %s, nothing shipped or installed", id, st, want)
		}
		t.Logf("node %s: %s", id, c.Last(id, "stats", "group="+clustertest.Group))
	}
	acked := l.Finish()
	clustertest.KillUnderLoad(t, c, "head", cluster.Chain.Head)
	clustertest.CheckAll(t, tail, acked)
}

// stopErrors are what a node logs when its store's background work
// outlives its chain view: a primary's flush or compaction whose edit
// can no longer be appended turns the store read-only.
var stopErrors = regexp.MustCompile(`background error|read-only|compaction failed|not the head of epoch`)

// heavyLoad writes 2 KiB values to new keys from four goroutines
// through w until stopped, so the primary flushes and compacts all the
// time (its tables are shipped while it is stopped); stop returns the
// acknowledged writes.
func heavyLoad(w *chain.Client, prefix string) (stop func() map[string]string) {
	var mu sync.Mutex
	acked := map[string]string{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				k := fmt.Sprintf("%s-%d-%06d", prefix, g, i)
				v := strings.Repeat(string(rune('a'+i%26)), 2048)
				pctx, pcancel := context.WithTimeout(ctx, time.Minute)
				err := w.Put(pctx, []byte(k), []byte(v))
				pcancel()
				if err == nil {
					mu.Lock()
					acked[k] = v
					mu.Unlock()
				}
			}
		}()
	}
	return func() map[string]string {
		cancel()
		wg.Wait()
		return acked
	}
}

// TestRubbleGracefulStop stops the head with SIGTERM under a heavy load
// while it flushes, compacts and ships: the node quiesces its store's
// background work while it still serves, and only then leaves the
// chain, so its log has no background error (a flush or compaction
// whose edit came after the node's chain view closed would turn the
// store read-only); the chain goes on without it and every
// acknowledged write is at the new tail. Then, under load again, the
// other nodes are stopped at once (a cluster's shutdown), as cleanly.
func TestRubbleGracefulStop(t *testing.T) {
	c := clustertest.NewClusterWith(t, rubbleArgs, "n1", "n2", "n3")
	writer := c.Client(t, chain.ReadCRRS)
	tail := c.Client(t, chain.ReadTail)
	before := c.WaitChain(func(cluster.Chain) bool { return true })
	head := before.Head()
	stop := heavyLoad(writer, "a")
	waitStats(t, c, head, "compactions as primary", func(st map[string]string) bool {
		return st["mode"] == "primary" && num(t, st, "compactions") > 2 && num(t, st, "shipped_edits") > 0
	})
	c.Signal(head, syscall.SIGTERM)
	after := c.WaitChain(func(ch cluster.Chain) bool { return ch.Epoch > before.Epoch && !slices.Contains(ch.Members, head) })
	first := num(t, waitStats(t, c, after.Head(), "a stats line", func(map[string]string) bool { return true }), "shipped_edits")
	waitStats(t, c, after.Head(), "shipping as the new primary", func(st map[string]string) bool {
		return st["mode"] == "primary" && num(t, st, "shipped_edits") > first
	})
	acked := stop()
	clustertest.CheckAll(t, tail, acked)
	if m := stopErrors.FindString(c.Stderr(head)); m != "" {
		t.Fatalf("head %s logged %q on a graceful stop:\n%s", head, m, c.Stderr(head))
	}
	stop = heavyLoad(writer, "b")
	waitStats(t, c, after.Head(), "more shipping", func(st map[string]string) bool {
		return num(t, st, "shipped_edits") > first+5
	})
	c.StopAll()
	stop()
	for _, id := range after.Members {
		if m := stopErrors.FindString(c.Stderr(id)); m != "" {
			t.Fatalf("node %s logged %q on a graceful stop:\n%s", id, m, c.Stderr(id))
		}
	}
	t.Logf("stopped %s under load (%d writes acknowledged), then %v at once: no background error", head, len(acked), after.Members)
}

// TestRubblePausedHead pauses the head (SIGSTOP) while it ships under a
// heavy load, so the chain, through etcd, makes its successor the head
// of a newer epoch, which fences the secondaries' targets
// (rubble.FenceSlots) before it writes into their pools; the old head
// then continues (SIGCONT) with whatever slot writes it had in flight,
// which the targets refuse, finds itself out of the chain and rejoins.
// Checked writes go on throughout: every acknowledged one is readable
// at the tail and from every member afterwards, and every pool passes
// fsck.
func TestRubblePausedHead(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	c := clustertest.NewClusterWith(t, rubbleArgs, ids...)
	writer := c.Client(t, chain.ReadCRRS)
	tail := c.Client(t, chain.ReadTail)
	before := c.WaitChain(func(cluster.Chain) bool { return true })
	head := before.Head()
	stop := heavyLoad(writer, "p")
	l := clustertest.StartLoad(t, writer, tail)
	waitStats(t, c, head, "shipping as primary", func(st map[string]string) bool {
		return st["mode"] == "primary" && num(t, st, "compactions") > 2 && num(t, st, "shipped_edits") > 5
	})
	c.Pause(head)
	after := c.WaitChain(func(ch cluster.Chain) bool { return ch.Epoch > before.Epoch && !slices.Contains(ch.Members, head) })
	first := num(t, waitStats(t, c, after.Head(), "a stats line", func(map[string]string) bool { return true }), "shipped_edits")
	waitStats(t, c, after.Head(), "shipping as the new primary", func(st map[string]string) bool {
		return st["mode"] == "primary" && num(t, st, "shipped_edits") > first+3
	})
	c.Resume(head)
	rejoined := c.WaitChain(func(ch cluster.Chain) bool { return len(ch.Members) == 3 && ch.Joining == "" })
	l.WaitAcked(t, l.Acked()+500)
	acked := l.Finish()
	for k, v := range stop() {
		acked[k] = v
	}
	clustertest.CheckAll(t, tail, acked)
	crrs := c.Client(t, chain.ReadCRRS)
	clustertest.CheckAll(t, crrs, acked)
	// The new head fenced the third node's target: the group's one
	// registrant there is a head of an epoch after the pause.
	third := slices.DeleteFunc(slices.Clone(after.Members), func(m string) bool { return m == after.Head() })[0]
	checkFenced(t, c, third, before.Epoch)
	fenced := strings.Count(c.Stderr(head), rubble.ErrDeposed.Error())
	t.Logf("paused %s; epoch %d head %s, then %v: %d writes checked; the old head's ships fenced off: %d",
		head, after.Epoch, after.Head(), rejoined.Members, len(acked), fenced)
	c.KillAll()
	for _, id := range ids {
		fsckPool(t, filepath.Join(c.Dir, id))
	}
}

// checkFenced reads the reservation of node id's target (as a host of
// its own, with Reservation Report): it holds Write Exclusive - All
// Registrants for one registrant, group Group's head of an epoch past
// after (and not past the chain's epoch when it is read).
func checkFenced(t *testing.T, c *clustertest.Cluster, id string, after uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nodes, err := c.Ctl.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := connectNode(t, nodes[id].Target, id, rubble.NodeNQN("test")+":reader").Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	upTo := c.WaitChain(func(cluster.Chain) bool { return true }).Epoch
	ok := st.Type == nvme.ResvWriteExclusiveAllRegs && len(st.Registrants) == 1
	for e := after + 1; ok && e <= upTo; e++ {
		if st.Registrants[0].Key == rubble.FenceKey(clustertest.Group, e) {
			t.Logf("node %s's target: fenced by the head of epoch %d (reservation %v)", id, e, st.Type)
			return
		}
	}
	t.Fatalf("node %s's target: reservation %v, registrants %+v; want one, a head of an epoch in (%d, %d]", id, st.Type, st.Registrants, after, upTo)
}

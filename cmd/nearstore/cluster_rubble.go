package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/kv/rubble"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/vfs"
	"github.com/nearstore/nearstore/volume"
)

// RubbleImage is the file under --data holding a --store rubble node's
// volume: an offloadfs with one directory per group (its slot pool and
// its store), exported by the node's NVMe/TCP target.
const RubbleImage = "rubble.img"

// rubbleFlags size a --store rubble node.
type rubbleFlags struct {
	size       string
	slots      int
	slotSize   int64
	targetAddr string
	fallback   bool
	window     time.Duration
}

func (o *rubbleFlags) flags(f interface {
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
	Int64Var(*int64, string, int64, string)
	BoolVar(*bool, string, bool, string)
	DurationVar(*time.Duration, string, time.Duration, string)
}) {
	f.StringVar(&o.size, "rubble-size", "4GiB", "size of the volume file --data/"+RubbleImage+" with --store rubble (sparse)")
	f.IntVar(&o.slots, "rubble-slots", 128, "slots in each group's pool with --store rubble (made on the first start)")
	f.Int64Var(&o.slotSize, "rubble-slot-size", 0, "slot size in bytes with --store rubble (0: the memtable size or twice the target table size, whichever is larger, plus 512 KiB)")
	f.StringVar(&o.targetAddr, "target-listen", "127.0.0.1:0", "address of the node's NVMe/TCP target with --store rubble (published in etcd)")
	f.BoolVar(&o.fallback, "rubble-fallback", false, "with --store rubble: as primary, make the group fall back to compaction on every replica at once")
	f.DurationVar(&o.window, "rubble-fallback-window", 30*time.Second, "with --store rubble: the period over which shipping time is compared with local compaction time")
}

// rubbleNode is what a --store rubble node shares among its groups: its
// volume, the offloadfs on it, the target exporting it, and the
// connections to the other nodes' targets.
type rubbleNode struct {
	vol  volume.Volume
	fsys *offloadfs.FS
	srv  *target.Server
	addr string
	data string // --data: each group's store in data/GROUP/db<N>, on the local file system
	ctl  *cluster.Control
	id   string
	// dialers connect to the other nodes' targets, one per group: each
	// fences its group's slot writes by the group's epoch.
	dialers []*rubble.TargetDialer
}

// startRubbleNode opens (or makes) the node's volume and file system and
// starts its target.
func startRubbleNode(ctx context.Context, data, id string, o rubbleFlags, ctl *cluster.Control, log *slog.Logger) (*rubbleNode, error) {
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	img := filepath.Join(data, RubbleImage)
	_, statErr := os.Stat(img)
	fresh := errors.Is(statErr, os.ErrNotExist)
	vol, err := volume.Open("file:" + img + "?size=" + o.size)
	if err != nil {
		return nil, err
	}
	rn := &rubbleNode{vol: vol, data: data, ctl: ctl, id: id}
	dev := offloadfs.VolumeDevice(vol)
	if fresh {
		if err := offloadfs.Mkfs(ctx, dev, offloadfs.MkfsOptions{}); err != nil {
			vol.Close()
			return nil, fmt.Errorf("mkfs %s: %w", img, err)
		}
	}
	if rn.fsys, err = offloadfs.Mount(ctx, dev, offloadfs.Options{Logger: log}); err != nil {
		vol.Close()
		return nil, fmt.Errorf("mount %s: %w", img, err)
	}
	rn.srv, err = target.New(target.Config{
		Subsystems: []target.SubsystemConfig{{NQN: rubble.NodeNQN(id), Namespaces: []target.NamespaceConfig{{Backend: vol, Name: img}}}},
		Logger:     log,
		// Only primaries writing tables into slots connect: batches of
		// large writes now and then, where polling for the next command
		// spends CPU the node's requests need and saves no latency that
		// matters.
		PollSpin: -1,
	})
	if err != nil {
		rn.close()
		return nil, err
	}
	ln, err := net.Listen("tcp", o.targetAddr)
	if err != nil {
		rn.srv = nil
		rn.close()
		return nil, err
	}
	rn.addr = ln.Addr().String()
	go rn.srv.Serve(ln)
	return rn, nil
}

// open opens group's store on the node's file system.
func (rn *rubbleNode) open(ctx context.Context, id, group string, o rubbleFlags, opts lsm.Options, log *slog.Logger) (*rubble.Store, error) {
	slotSize := o.slotSize
	if slotSize <= 0 {
		memt, tfs := int64(opts.MemTableSize), opts.TargetFileSize
		if memt <= 0 {
			memt = 4 << 20
		}
		if tfs <= 0 {
			tfs = 2 << 20
		}
		slotSize = max(memt, 2*tfs) + 512<<10
	}
	d := &rubble.TargetDialer{Control: rn.ctl, Self: rn.id, Group: group}
	rn.dialers = append(rn.dialers, d)
	return rubble.OpenStore(ctx, rubble.StoreConfig{
		ID: id, FS: rn.fsys, Local: vfs.OS(rn.data), Dir: group, Slots: o.slots, SlotSize: slotSize, Options: opts,
		Dialer: d, Fallback: o.fallback, FallbackWindow: o.window, Log: log,
	})
}

// close stops the target and unmounts (the stores are closed first).
func (rn *rubbleNode) close() error {
	for _, d := range rn.dialers {
		d.Close()
	}
	if rn.srv != nil {
		rn.srv.Close()
	}
	var err error
	if rn.fsys != nil {
		err = rn.fsys.Close()
	}
	if cerr := rn.vol.Close(); err == nil {
		err = cerr
	}
	return err
}

// statsLine is one "stats" line of a node serving group: its store's
// flush and compaction work since the process started (the CPU a
// RubbleDB secondary is spared)
// and, with --store rubble, its role and shipping. Fields are
// name=value, durations in milliseconds, bytes in bytes.
func statsLine(id, group string, st chain.Store) string {
	var m lsm.Metrics
	mode, ship := "lsm", ""
	switch s := st.(type) {
	case *rubble.Store:
		m = s.Work()
		rs := s.Stats()
		mode = rs.Mode.String()
		ship = fmt.Sprintf(" shipped_edits=%d shipped_tables=%d shipped_captured=%d shipped_bytes=%d ship_ms=%d installed=%d resyncs=%d reused=%d fell_back=%v",
			rs.ShippedEdits, rs.ShippedTables, rs.ShippedCaptured, rs.ShippedBytes, rs.ShipTime.Milliseconds(), rs.Installed, rs.Resyncs, rs.Reused, rs.FellBack)
	case interface{ DB() *lsm.DB }:
		m = s.DB().Metrics()
	default:
		return ""
	}
	return fmt.Sprintf("stats node=%s group=%s mode=%s flushes=%d flush_bytes=%d flush_ms=%d compactions=%d compact_read=%d compact_written=%d compact_ms=%d%s",
		id, group, mode, m.Flush.Count, m.Flush.BytesWritten, m.Flush.Duration.Milliseconds(),
		m.Compact.Count, m.Compact.BytesRead, m.Compact.BytesWritten, m.Compact.Duration.Milliseconds(), ship)
}

// printStats writes a stats line for every group every interval until
// ctx ends, and once more then.
func printStats(ctx context.Context, w io.Writer, mu *sync.Mutex, id string, groups []string, stores []chain.Store, every time.Duration) {
	emit := func() {
		mu.Lock()
		defer mu.Unlock()
		for i, st := range stores {
			if l := statsLine(id, groups[i], st); l != "" {
				fmt.Fprintln(w, l)
			}
		}
	}
	everyUntil(ctx, every, emit)
}

// logShipStats logs, at debug level, each group's chain.Node.ShipStats
// (write messages sent to the successor and the writes in them, since
// the node started) every interval when they moved, and once more when
// ctx ends: "msg=\"chain shipped\" group=G messages=N writes=W". The
// bench reads them from the node's stderr (group commit's writes per
// message, per role).
func logShipStats(ctx context.Context, log *slog.Logger, groups []string, nodes []*chain.Node, every time.Duration) {
	last := make([]chain.ShipStats, len(nodes))
	emit := func() {
		for i, n := range nodes {
			if st := n.ShipStats(); st != last[i] {
				last[i] = st
				log.Debug("chain shipped", "group", groups[i], "messages", st.Messages, "writes", st.Writes)
			}
		}
	}
	everyUntil(ctx, every, emit)
}

// everyUntil calls emit every interval, and once more when ctx ends.
func everyUntil(ctx context.Context, every time.Duration, emit func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			emit()
			return
		case <-t.C:
			emit()
		}
	}
}

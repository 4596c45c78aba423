package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/chain/leedstore"
	"github.com/nearstore/nearstore/kv/chain/lsmstore"
	"github.com/nearstore/nearstore/kv/leed"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/volume"
)

// nodeStore is what a cluster node replicates: --store lsm (kv/lsm in
// --data), leed (a LEED store on the file --data/leed.img of
// --leed-size bytes, kept across restarts) or rubble (RubbleDB, kv/rubble:
// every group's store and slot pool on the node's volume
// --data/rubble.img, which its NVMe/TCP target exports; startRubble
// first).
type nodeStore struct {
	kind     string
	leedSize string
	memt     int
	rubble   rubbleFlags
	rn       *rubbleNode
}

// startRubble starts a --store rubble node's volume and target; the
// target's address is to be published with the node (empty for other
// stores). stop undoes it once every store is closed.
func (o *nodeStore) startRubble(ctx context.Context, data, id string, ctl *cluster.Control, log *slog.Logger) (addr string, stop func() error, err error) {
	if o.kind != "rubble" {
		return "", func() error { return nil }, nil
	}
	if o.rn, err = startRubbleNode(ctx, data, id, o.rubble, ctl, log); err != nil {
		return "", nil, err
	}
	return o.rn.addr, o.rn.close, nil
}

// open opens the store of group in data (its directory for lsm and
// leed; the node's volume for rubble).
func (o nodeStore) open(ctx context.Context, id, group, data string, log *slog.Logger) (chain.Store, func() error, error) {
	switch o.kind {
	case "rubble":
		st, err := o.rn.open(ctx, id, group, o.rubble, lsm.Options{MemTableSize: o.memt, Logger: log}, log)
		if err != nil {
			return nil, nil, err
		}
		return st, st.Close, nil
	case "", "lsm":
		st, err := lsmstore.Open(data, lsm.Options{MemTableSize: o.memt, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return st, st.Close, nil
	case "leed":
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, nil, err
		}
		v, err := volume.Open("file:" + filepath.Join(data, "leed.img") + "?size=" + o.leedSize)
		if err != nil {
			return nil, nil, err
		}
		st, err := leedstore.Open(ctx, v, leed.Options{Logger: log})
		if err != nil {
			v.Close()
			return nil, nil, err
		}
		return st, func() error {
			err := st.Close()
			if cerr := v.Close(); err == nil {
				err = cerr
			}
			return err
		}, nil
	default:
		return nil, nil, usageErrorf("--store %q: want lsm, leed or rubble", o.kind)
	}
}

func (o *nodeStore) flags(f *pflag.FlagSet) {
	f.StringVar(&o.kind, "store", "lsm", "the replicated store: lsm (kv/lsm in --data), leed (LEED on --data/leed.img; keys of 1 to 16 bytes) or rubble (RubbleDB: the head compacts and ships its tables into the others' slot pools on --data/"+RubbleImage+")")
	f.StringVar(&o.leedSize, "leed-size", "256MiB", "size of the LEED device file with --store leed")
	o.rubble.flags(f)
}

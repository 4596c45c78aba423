package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/chain/leedstore"
	"github.com/nearstore/nearstore/kv/chain/lsmstore"
	"github.com/nearstore/nearstore/kv/leed"
	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/volume"
)

// nodeStore is what a cluster node replicates: --store lsm (kv/lsm in
// --data) or leed (a LEED store on the file --data/leed.img of
// --leed-size bytes, kept across restarts).
type nodeStore struct {
	kind     string
	leedSize string
	memt     int
}

func (o nodeStore) open(ctx context.Context, data string, log *slog.Logger) (chain.Store, func() error, error) {
	switch o.kind {
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
		return nil, nil, usageErrorf("--store %q: want lsm or leed", o.kind)
	}
}

func (o *nodeStore) flags(f interface {
	StringVar(*string, string, string, string)
}) {
	f.StringVar(&o.kind, "store", "lsm", "the replicated store: lsm (kv/lsm in --data) or leed (LEED on --data/leed.img; keys of 1 to 16 bytes)")
	f.StringVar(&o.leedSize, "leed-size", "256MiB", "size of the LEED device file with --store leed")
}

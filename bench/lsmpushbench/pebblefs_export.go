package lsmpushbench

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
	pvfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/nearstore/nearstore/bench/internal/harness"
	"github.com/nearstore/nearstore/offloadfs"
)

// PebbleFS returns Pebble's vfs.FS over fsys (pebbleFS), for the other
// benchmarks that run Pebble on offloadfs.
func PebbleFS(fsys *offloadfs.FS) pvfs.FS { return pebbleFS{fsys} }

// SettlePebble flushes d's memtable and waits until no flush or
// compaction runs, so that a benchmark's next phase starts from a quiet
// store; the Pebble baselines of this and the other LSM benchmarks settle
// through it.
func SettlePebble(ctx context.Context, d *pebble.DB) error {
	if err := d.Flush(); err != nil {
		return err
	}
	return harness.WaitIdle(ctx, func() bool {
		m := d.Metrics()
		return m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0
	})
}

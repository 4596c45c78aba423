package lsmpushbench

import (
	pvfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/nearstore/nearstore/offloadfs"
)

// PebbleFS returns Pebble's vfs.FS over fsys (pebbleFS), for the other
// benchmarks that run Pebble on offloadfs.
func PebbleFS(fsys *offloadfs.FS) pvfs.FS { return pebbleFS{fsys} }

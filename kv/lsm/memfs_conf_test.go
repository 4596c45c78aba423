package lsm

import (
	"testing"

	"github.com/nearstore/nearstore/vfs"
	"github.com/nearstore/nearstore/vfs/vfstest"
)

// The test file system must keep vfs.FS's promises, or tests of the store
// on it would prove nothing.
func TestMemFSConformance(t *testing.T) {
	vfstest.Run(t, func(t *testing.T) vfs.FS { return newMemFS() })
}

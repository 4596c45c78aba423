package offloadfs_test

import (
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

// Both kinds of device the file system runs on fit the interface: remote
// namespaces as they are, local volumes through VolumeDevice.
var (
	_ offloadfs.Device = (*host.Namespace)(nil)
	_ offloadfs.Zeroer = (*host.Namespace)(nil)
	_ offloadfs.Volume = volume.Volume(nil)
)

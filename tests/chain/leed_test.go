package chain_test

import (
	"testing"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/internal/clustertest"
)

// TestLeedKillNodeUnderLoad is TestKillNodeUnderLoad with every node's
// replica a LEED store (kv/chain/leedstore) on a device file: a killed
// replica loses no acknowledged write, and on restart it recovers its
// store from the device, rejoins through COPY (a LEED Reset, Import and
// SetApplied) and serves the same data.
func TestLeedKillNodeUnderLoad(t *testing.T) {
	args := []string{"--store", "leed", "--leed-size", "32MiB"}
	for _, tt := range []struct {
		name string
		pick func(cluster.Chain) string
	}{
		{"head", cluster.Chain.Head},
		{"middle", func(c cluster.Chain) string { return c.Members[1] }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clustertest.KillUnderLoad(t, clustertest.NewClusterWith(t, args, "n1", "n2", "n3"), tt.name, tt.pick)
		})
	}
}

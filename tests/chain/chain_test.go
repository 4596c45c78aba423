// Package chain_test runs a replicated cluster as a user would: a real
// etcd, and each node a separate "nearstore cluster node" process on
// loopback TCP with its own kv/lsm directory. It kills nodes with SIGKILL
// under a load of checked writes and checks that every acknowledged write
// survives and that a restarted node rejoins through COPY.
package chain_test

import (
	"testing"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/clustertest"
)

func TestMain(m *testing.M) { clitest.Main(m) }

func TestKillNodeUnderLoad(t *testing.T) {
	for _, tt := range []struct {
		name string
		pick func(cluster.Chain) string
	}{
		{"head", cluster.Chain.Head},
		{"middle", func(c cluster.Chain) string { return c.Members[1] }},
		{"tail", cluster.Chain.Tail},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clustertest.KillUnderLoad(t, clustertest.NewCluster(t, "n1", "n2", "n3"), tt.name, tt.pick)
		})
	}
}

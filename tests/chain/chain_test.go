// Package chain_test runs a replicated cluster as a user would: a real
// etcd, and each node a separate "nearstore cluster node" process on
// loopback TCP with its own kv/lsm directory. It kills nodes with SIGKILL
// under a load of checked writes and checks that every acknowledged write
// survives and that a restarted node rejoins through COPY.
package chain_test

import (
	"testing"

	"github.com/nearstore/nearstore/internal/clitest"
	"github.com/nearstore/nearstore/internal/clustertest"
)

func TestMain(m *testing.M) { clitest.Main(m) }

func TestKillNodeUnderLoad(t *testing.T) {
	for _, v := range clustertest.Victims() {
		t.Run(v.Name, func(t *testing.T) {
			clustertest.KillUnderLoad(t, clustertest.NewCluster(t, "n1", "n2", "n3"), v.Name, v.Pick)
		})
	}
}

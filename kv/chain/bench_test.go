package chain_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/nearstore/nearstore/internal/chaintest"
	"github.com/nearstore/nearstore/kv/chain"
	"github.com/nearstore/nearstore/kv/chain/leedstore"
	"github.com/nearstore/nearstore/kv/leed"
	"github.com/nearstore/nearstore/volume"
)

// BenchmarkLeedChainPut is a replicated PUT on LEED replicas, R = 3, all
// in this process on loopback TCP (each node a LEED store on a 256 MiB
// device file, as "node serve --store leed" runs it): 32 writers of
// 256-byte values over 5,000 keys. Its CPU profile is the whole write
// path: client, head, middle and tail.
func BenchmarkLeedChainPut(b *testing.B) {
	r := newRig(b)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r.open = func(id string) (store, error) {
		dev, err := volume.Open("file:" + filepath.Join(r.dir, id+".img") + "?size=256MiB")
		if err != nil {
			return nil, err
		}
		st, err := leedstore.Open(context.Background(), dev, leed.Options{Logger: quiet})
		if err != nil {
			dev.Close()
			return nil, err
		}
		return closeBoth{st, dev}, nil
	}
	benchChainPut(b, r)
}

// BenchmarkLsmChainPut is BenchmarkLeedChainPut on kv/lsm replicas
// (lsmstore, as "node serve --store lsm" runs them).
func BenchmarkLsmChainPut(b *testing.B) {
	benchChainPut(b, newRig(b))
}

// benchChainPut runs the replicated PUT load on r's stores, R = 3, and
// reports the CPU per write and the writes per Ship message from the
// head.
func benchChainPut(b *testing.B, r *rig) {
	ctx := context.Background()
	c0 := r.startChain(ctx, "a", "b", "c")
	c, err := chain.NewClient(ctx, chain.ClientConfig{Control: r.ctl, Group: "g"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	head := r.node(c0.Head()).node
	val := make([]byte, 256)
	var next atomic.Int64
	b.SetParallelism(16) // 32 writers on 2 CPUs
	b.ResetTimer()
	cpu := chaintest.StartCPU()
	before := head.ShipStats()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := fmt.Appendf(nil, "user%08d", next.Add(1)%5000)
			if err := c.Put(ctx, k, val); err != nil {
				b.Error(err)
				return
			}
		}
	})
	cpu.Report(b)
	if s := head.ShipStats(); s.Messages > before.Messages {
		b.ReportMetric(float64(s.Writes-before.Writes)/float64(s.Messages-before.Messages), "writes/msg")
	}
}

// closeBoth closes a leedstore and then its device.
type closeBoth struct {
	*leedstore.Store
	dev io.Closer
}

func (c closeBoth) Close() error {
	err := c.Store.Close()
	if cerr := c.dev.Close(); err == nil {
		err = cerr
	}
	return err
}

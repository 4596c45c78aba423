package target

import (
	"context"
	"log/slog"
	"testing"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/volume"
)

// benchHostNQN is the host the benchmarks below connect as.
const benchHostNQN = "nqn.2026-11.io.nearstore:bench"

// BenchmarkFunctionCommand: one λ read of a block by the echo function,
// host and target in one process: the path every function command takes
// (capsule, checks, warm worker, execFunction, completion). Its allocs/op,
// host's and target's together, is the steady figure; its time is the
// machine's.
func BenchmarkFunctionCommand(b *testing.B) {
	ctx := context.Background()
	_, addr := startServer(b, Config{Runtimes: []sandbox.Runtime{echoRuntime{}}})
	c, ns := connectAs(b, addr, benchHostNQN, 1)
	fn, err := c.LoadFunction(ctx, echoModuleBytes)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ns.WriteAt(make([]byte, 4096), 0); err != nil {
		b.Fatal(err)
	}
	files := []pushdown.File{{Size: 4096, Extents: []pushdown.Extent{{LBA: 0, Blocks: 8}}}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := ns.LambdaRead(ctx, fn, files, host.Start{Length: 512}, nil, 1024); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBPFKVPushdown: one BPF-KV get (btree_lookup under the eBPF
// runtime, a tree of three levels, four reads) per Pushdown Read, host and
// target in one process: issue 17's pushdown command. As above, allocs/op
// is the steady figure.
func BenchmarkBPFKVPushdown(b *testing.B) {
	ctx := context.Background()
	keys := make([]uint64, 5000)
	for i := range keys {
		keys[i] = uint64(i)*7 + 1
	}
	index, values := functions.BuildBTree(keys, functions.DefaultValueSize)
	values = append(values, make([]byte, (512-len(values)%512)%512)...)
	v, err := volume.Open("mem:16MiB")
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	if _, err := v.WriteAt(index, 0); err != nil {
		b.Fatal(err)
	}
	if _, err := v.WriteAt(values, int64(len(index))); err != nil {
		b.Fatal(err)
	}
	files := []pushdown.File{
		{Size: uint64(len(index)), Extents: []pushdown.Extent{{LBA: 0, Blocks: uint32(len(index) / 512)}}},
		{Size: uint64(len(values)), Extents: []pushdown.Extent{{LBA: uint64(len(index) / 512), Blocks: uint32(len(values) / 512)}}},
	}
	cfg := Config{
		Runtimes:   []sandbox.Runtime{ebpf.NewRuntime(ebpf.Options{Logger: slog.New(slog.DiscardHandler)})},
		Subsystems: []SubsystemConfig{{NQN: testNQN, Namespaces: []NamespaceConfig{{Backend: v, Name: "bpfkv"}}}},
	}
	_, addr := startServer(b, cfg)
	c, ns := connectAs(b, addr, benchHostNQN, 1)
	code, err := functions.Module("btree_lookup", sandbox.KindEBPF)
	if err != nil {
		b.Fatal(err)
	}
	fn, err := c.LoadFunction(ctx, code)
	if err != nil {
		b.Fatal(err)
	}
	scratch := make([]byte, sandbox.ScratchSize)
	i := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		functions.BTreeRequest{Mode: functions.BTreeGet, Key: keys[i%len(keys)], ValueSize: functions.DefaultValueSize}.Encode(scratch)
		i += 997
		res, err := ns.Pushdown(ctx, fn, files, host.Start{File: functions.IndexFile, Length: functions.NodeSize}, scratch)
		if err != nil {
			b.Fatal(err)
		}
		if r, err := functions.ParseBTreeResult(res.Output); err != nil || r.Status != functions.BTreeFound {
			b.Fatalf("get: status %d, %v", r.Status, err)
		}
	}
}

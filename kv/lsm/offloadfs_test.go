package lsm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

// TestModelOnOffloadFS runs the model test on offloadfs over a memory
// volume, the file system the engine runs on at a target, through its
// vfs adapter.
func TestModelOnOffloadFS(t *testing.T) {
	ctx := context.Background()
	v, err := volume.Open("mem:256MiB")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	dev := offloadfs.VolumeDevice(v)
	if err := offloadfs.Mkfs(ctx, dev, offloadfs.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	fsys, err := offloadfs.Mount(ctx, dev, offloadfs.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	opts := smallOptions()
	vf := fsys.VFS()
	d, err := Open(vf, "db", opts)
	if err != nil {
		t.Fatal(err)
	}
	r := &modelRun{t: t, rng: rand.New(rand.NewPCG(11, 12)), fs: vf, opts: opts, d: d, m: model{}, nkeys: 300}
	steps := 2000
	if testing.Short() {
		steps = 500
	}
	for i := 0; i < steps; i++ {
		r.step()
	}
	r.closeSnapshots()
	r.check(r.d.Compact(ctx, []byte(""), []byte("z")))
	r.checkAll()
	t.Logf("%s", fmt.Sprint(r.d.Metrics().Levels[1].Tables, " L1 tables on offloadfs"))
	r.check(r.d.Close())
}

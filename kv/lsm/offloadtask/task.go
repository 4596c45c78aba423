// Package offloadtask holds kv/lsm's offload tasks, the engine's side of
// OffloadDB (docs/LSM.md, "Offloaded compaction"): Register adds them to
// an engine's registry, in the binary that serves the engine (`target
// serve --offload`, `offload serve`).
//
//   - lsm.compact (lsm.CompactTaskName): merges the granted input tables
//     into the preallocated outputs as the lsm.CompactArgs say, and
//     returns the new tables as an encoded lsm.VersionEdit holding only
//     their NewFiles, in output order. The host checks and logs it.
package offloadtask

import (
	"context"
	"fmt"

	"github.com/nearstore/nearstore/kv/lsm"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/vfs"
)

// Register adds kv/lsm's tasks to r.
func Register(r *offload.Registry) error {
	return r.Register(lsm.CompactTaskName, compact)
}

// compact is lsm.compact.
func compact(ctx context.Context, env *offload.Env, args []byte) ([]byte, error) {
	a, err := lsm.DecodeCompactArgs(args)
	if err != nil {
		return nil, err
	}
	n := a.NumInputs()
	if env.NumFiles() != n+len(a.Outputs) {
		return nil, fmt.Errorf("lsm.compact: %d files, the arguments name %d", env.NumFiles(), n+len(a.Outputs))
	}
	for i := range env.NumFiles() {
		if env.Writable(i) != (i >= n) {
			return nil, fmt.Errorf("lsm.compact: file %d: inputs come first, read-only, then the outputs", i)
		}
	}
	i := 0
	for _, in := range a.Task.Inputs {
		for _, fm := range in.Files {
			if env.Size(i) != int64(fm.Size) {
				return nil, fmt.Errorf("lsm.compact: input %06d has %d bytes, the arguments say %d", fm.FileNum, env.Size(i), fm.Size)
			}
			i++
		}
	}
	files := lsm.NewTaskFiles(a, func(i int) vfs.File { return &envFile{ctx: ctx, env: env, i: i} })
	res, err := a.Task.Run(ctx, files)
	if err != nil {
		return nil, err
	}
	e := lsm.VersionEdit{NewFiles: res.Edit.NewFiles}
	return e.Encode(nil), nil
}

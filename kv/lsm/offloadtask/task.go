// Package offloadtask holds kv/lsm's offload tasks, the engine's side of
// OffloadDB (docs/LSM.md, "Offloaded compaction"): Register adds them to
// an engine's registry, in the binary that serves the engine (`target
// serve --offload`, `offload serve`).
//
//   - lsm.compact (lsm.CompactTaskName): merges the granted input tables
//     into the preallocated outputs as the lsm.CompactArgs say, and
//     returns the new tables as an encoded lsm.VersionEdit holding only
//     their NewFiles, in output order. The host checks and logs it.
//   - lsm.flush (lsm.FlushTaskName): log recycling; reads the granted
//     WAL and writes the memtable's L0 table, whose entries the
//     lsm.FlushArgs locate in it, into the preallocated output; returns
//     the table (or none) as an encoded lsm.VersionEdit.
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
	if err := r.Register(lsm.CompactTaskName, compact); err != nil {
		return err
	}
	return r.Register(lsm.FlushTaskName, flush)
}

// flush is lsm.flush.
func flush(ctx context.Context, env *offload.Env, args []byte) ([]byte, error) {
	a, err := lsm.DecodeFlushArgs(args)
	if err != nil {
		return nil, err
	}
	if env.NumFiles() != 2 || env.Writable(0) || !env.Writable(1) {
		return nil, fmt.Errorf("lsm.flush: want the WAL, read-only, then the output; got %d files", env.NumFiles())
	}
	wal := make([]byte, env.Size(0))
	for off := 0; off < len(wal); off += readAhead {
		if _, err := env.ReadAt(ctx, 0, wal[off:min(off+readAhead, len(wal))], int64(off)); err != nil {
			return nil, err
		}
	}
	meta, err := lsm.RunFlush(ctx, a, wal, &envFile{ctx: ctx, env: env, i: 1})
	if err != nil {
		return nil, err
	}
	var e lsm.VersionEdit
	if meta != nil {
		e.NewFiles = []lsm.NewFile{{Level: 0, Meta: meta}}
	}
	return e.Encode(nil), nil
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

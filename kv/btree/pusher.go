package btree

import (
	"context"
	"errors"
	"fmt"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// ErrPushdownUnavailable is wrapped by a Pusher's error when the request
// could not run at the target but the data is fine: no extent maps the
// target will accept (not synchronised yet, stale, too many extents), or
// limits the request does not fit. A store that gets it reads the tree
// itself instead, and counts a fallback (Stats.Fallbacks); so it does when
// the target reports its step or time limit. Every other pushdown error
// is the operation's error.
var ErrPushdownUnavailable = errors.New("btree: pushdown unavailable")

// Pusher runs one pushdown request over the files of a store at the
// target holding them: the target reads start, calls the function fn
// with it and the scratch, follows the reads the function asks for, and
// returns the final scratch as the result's Output. files are the store's
// index file and value log, in that order (functions.IndexFile,
// functions.ValueFile).
//
// RawPusher is one. A file system that keeps the target's extent maps in
// sync (version-checked pushdown) is another; it wraps
// ErrPushdownUnavailable in the errors that mean "plan again or read
// plainly".
type Pusher interface {
	Pushdown(ctx context.Context, fn sandbox.ID, files []*offloadfs.File, start host.Start, scratch []byte) (pushdown.Result, error)
}

// FunctionLoader ships a module to the target; *host.Controller is one.
type FunctionLoader interface {
	LoadFunction(ctx context.Context, module []byte) (sandbox.ID, error)
}

// LoaderFunc adapts a function to FunctionLoader: a file system's function
// registry (offloadfs.FS.RegisterFunction, which also prepares the
// host-side fallback of its version-checked Pushdown) is one.
type LoaderFunc func(ctx context.Context, module []byte) (sandbox.ID, error)

// LoadFunction implements FunctionLoader.
func (f LoaderFunc) LoadFunction(ctx context.Context, module []byte) (sandbox.ID, error) {
	return f(ctx, module)
}

// RawPusher pushes requests down as raw-extent requests on a namespace:
// each file's current extent map, with inode and version 0, which the
// target serves without version checks. It is only safe while nothing
// moves the files' blocks — true of a store's files, which are sized once
// at load and then only overwritten in place — and is what the store uses
// until file-level, version-checked pushdown is wired in.
type RawPusher struct {
	NS *host.Namespace
}

// Pushdown implements Pusher.
func (p RawPusher) Pushdown(ctx context.Context, fn sandbox.ID, files []*offloadfs.File, start host.Start, scratch []byte) (pushdown.Result, error) {
	table := make([]pushdown.File, len(files))
	for i, f := range files {
		pf, err := f.Extents()
		if err != nil {
			return pushdown.Result{}, fmt.Errorf("%w: extent map of %s: %w", ErrPushdownUnavailable, f.Name(), err)
		}
		if len(pf.Extents) > pushdown.MaxExtents {
			return pushdown.Result{}, fmt.Errorf("%w: %s has %d extents, a request carries at most %d",
				ErrPushdownUnavailable, f.Name(), len(pf.Extents), pushdown.MaxExtents)
		}
		pf.ID, pf.Version = 0, 0
		table[i] = pf
	}
	res, err := p.NS.Pushdown(ctx, fn, table, start, scratch)
	if errors.Is(err, &nvme.StatusError{Status: nvme.StatusStaleExtentMap}) {
		err = fmt.Errorf("%w: %w", ErrPushdownUnavailable, err)
	}
	return res, err
}

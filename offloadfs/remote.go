package offloadfs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// Remote is the storage target holding the file system's namespace, as the
// owner uses it: the synchronizer keeps the target's extent maps in step
// (docs/PROTOCOL.md, "Extent Map Put" and "Extent Map Query"), the
// file-level function calls send requests naming files by inode and
// version, and grants go through it. A call keeps none of its arguments
// once it returns (the file system reuses its file tables). *host.Namespace
// satisfies it; tests put delays or faults in between.
type Remote interface {
	// UpdateExtentMaps sends puts and removals in order and returns how
	// many the target applied and how many it ignored as not newer than
	// what it holds.
	UpdateExtentMaps(ctx context.Context, ups []pushdown.MapUpdate) (applied, ignored int, err error)
	// ExtentMapVersions returns the versions the target holds for the
	// inodes: 0 for none, or for a removal.
	ExtentMapVersions(ctx context.Context, inodes []uint64) ([]uint64, error)
	Pushdown(ctx context.Context, fn sandbox.ID, files []pushdown.File, start host.Start, scratch []byte) (pushdown.Result, error)
	LambdaRead(ctx context.Context, fn sandbox.ID, files []pushdown.File, start host.Start, params []byte, outCap int) (pushdown.Result, error)
	LambdaWrite(ctx context.Context, fn sandbox.ID, files []pushdown.File, start host.Start, params, data []byte) (int, error)
	Grant(ctx context.Context, g host.Grant) error
	ReleaseGrant(ctx context.Context, id uint64) error
	// ReleaseAllGrants ends every grant this host holds on the
	// namespace: a read-write mount fences its predecessor's grants.
	ReleaseAllGrants(ctx context.Context) (int, error)
}

// FunctionLoader loads a function module at the target, for
// RegisterFunction. *host.Controller satisfies it.
type FunctionLoader interface {
	LoadFunction(ctx context.Context, module []byte) (sandbox.ID, error)
}

var (
	_ Remote         = (*host.Namespace)(nil)
	_ FunctionLoader = (*host.Controller)(nil)
)

// Errors of the file-level function calls and grants.
var (
	// ErrNoFallback means a function request could not run at the target
	// (no target, versions not synchronized, refused, or its result
	// discarded) and the function is not registered for host-side
	// execution (RegisterFunction), so it did not run at all. Nothing is
	// wrong with the data: register the function, or read the ordinary
	// way.
	ErrNoFallback = errors.New("offloadfs: the request could not run at the target and the function has no host-side module")
	// ErrNoRemote means an operation needs a target (Options.Remote) and
	// the mount has none, or is read-only.
	ErrNoRemote = errors.New("offloadfs: no target: the mount has no Remote, or is read-only")
	// ErrGranted means a change would move, free or overwrite blocks that
	// are granted to another host: a truncation below a granted size, or a
	// write into granted bytes. Release the grant first (or wait for it to
	// expire). Removing a granted file is allowed: its blocks stay until
	// the last grant ends.
	ErrGranted error = &sysError{"offloadfs: blocks granted to another host", syscall.EBUSY}
)

// Status errors the target answers with, for errors.Is.
var (
	errFunctionNotFound error = &nvme.StatusError{Status: nvme.StatusFunctionNotFound}
	errFunctionTimeout  error = &nvme.StatusError{Status: nvme.StatusFunctionTimeout}
	errFunctionMemory   error = &nvme.StatusError{Status: nvme.StatusFunctionMemory}
	errFunctionOutput   error = &nvme.StatusError{Status: nvme.StatusFunctionOutput}
	errFunctionRejected error = &nvme.StatusError{Status: nvme.StatusFunctionRejected}
	errOutsideFile      error = &nvme.StatusError{Status: nvme.StatusOutsideFile}
	errStepLimit        error = &nvme.StatusError{Status: nvme.StatusStepLimit}
	errBadRequest       error = &nvme.StatusError{Status: nvme.StatusBadFunctionRequest}
)

// remoteOutcome is what a request's error from the target means for the
// file system.
type remoteOutcome uint8

const (
	// outcomeResult: the request ran (or failed on its own); its result
	// stands if the versions held.
	outcomeResult remoteOutcome = iota
	// outcomeStale: the target did not hold the versions.
	outcomeStale
	// outcomeNoFunction: the target does not have the function (it
	// restarted, or it was never loaded there).
	outcomeNoFunction
	// outcomeLost: the connection broke; the target may have restarted.
	outcomeLost
)

func classify(err error) remoteOutcome {
	switch {
	case err == nil:
		return outcomeResult
	case errors.Is(err, host.ErrStaleExtentMap):
		return outcomeStale
	case errors.Is(err, errFunctionNotFound):
		return outcomeNoFunction
	case errors.Is(err, host.ErrConnectionLost):
		return outcomeLost
	}
	return outcomeResult
}

// remoteError makes a function's failure at the target match the same
// sentinels as the same failure on the host (sandbox.ErrTimeout,
// pushdown.ErrOutsideFile, a *sandbox.FunctionError with the code, ...),
// so callers need not care where a request ran.
func remoteError(err error) error {
	if err == nil {
		return nil
	}
	var fe *host.FunctionError
	if errors.As(err, &fe) {
		if fe.Code == 0 {
			return err // a trap: matches sandbox.ErrFunction already
		}
		return fmt.Errorf("%w: %w", &sandbox.FunctionError{Code: fe.Code}, err)
	}
	for _, m := range []struct{ status, sentinel error }{
		{errFunctionTimeout, sandbox.ErrTimeout},
		{errFunctionMemory, sandbox.ErrMemory},
		{errFunctionOutput, sandbox.ErrOutput},
		{errFunctionRejected, sandbox.ErrBadModule},
		{errOutsideFile, pushdown.ErrOutsideFile},
		{errStepLimit, pushdown.ErrStepLimit},
		{errBadRequest, pushdown.ErrMalformed},
	} {
		if errors.Is(err, m.status) {
			return fmt.Errorf("%w: %w", m.sentinel, err)
		}
	}
	return err
}

package wasm

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nearstore/nearstore/sandbox"
	"github.com/tetratelabs/wazero/sys"
)

// ErrTrap: the function trapped (unreachable, integer division by zero, an
// invalid conversion, a bad indirect call, ...) or, for a Go function,
// exited (a panic or os.Exit). The message names the trap. It wraps
// sandbox.ErrFunction, as a negative return code does: the function failed
// on its own, without breaking a memory, time or output limit. It is not a
// *sandbox.FunctionError, since there is no code to pass on.
var ErrTrap = fmt.Errorf("%w: wasm trap", sandbox.ErrFunction)

// trapMessage finds the wazero runtime error in err's chain: wazero wraps
// it as "wasm error: <trap>\nwasm stack trace: ...".
func trapMessage(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "wasm error: ")
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// classify maps a failed call's error to the sandbox's sentinels:
//
//   - the call's deadline (Limits.Time) passed: sandbox.ErrTimeout. If the
//     caller's own context ended first, its error is returned instead
//     (wrapped), since the function is not at fault;
//   - out-of-bounds memory access, or the call stack overflowing:
//     sandbox.ErrMemory;
//   - any other trap, or a WASI proc_exit: ErrTrap.
func (m *Module) classify(parent context.Context, name string, err error) error {
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("wasm: %s interrupted: %w", name, perr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: wasm: %s ran over %v", sandbox.ErrTimeout, name, m.lim.Time)
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return fmt.Errorf("%w: wasm: %s ran over %v", sandbox.ErrTimeout, name, m.lim.Time)
		case sys.ExitCodeContextCanceled:
			return fmt.Errorf("wasm: %s interrupted: %w", name, context.Canceled)
		}
		return fmt.Errorf("%w: %s exited with code %d", ErrTrap, name, exit.ExitCode())
	}
	switch msg := trapMessage(err); msg {
	case "out of bounds memory access", "stack overflow":
		// The function ran outside its memory or out of call stack.
		return fmt.Errorf("%w: wasm: %s: %s", sandbox.ErrMemory, name, msg)
	}
	return fmt.Errorf("%w: %s: %s", ErrTrap, name, trapMessage(err))
}

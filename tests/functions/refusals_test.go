package functions_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/sandbox"
)

// TestRefusalReasons: a Function Load the target refuses comes back with
// the target's own reason, read from its Function Load Refusals log
// (C0h), still as the *nvme.StatusError it was; the Error Information log
// entry points at that page; the page lists refusals newest first.
func TestRefusalReasons(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	// A wasm header and nothing valid after it, and an ELF header that is
	// no eBPF object.
	bad := [][]byte{
		[]byte("\x00asm\x01\x00\x00\x00\x01\xff"),
		append([]byte("\x7fELF"), make([]byte, 60)...),
	}
	for _, mod := range bad {
		_, err := e.ctrl.LoadFunction(ctx, mod)
		var se *nvme.StatusError
		if !errors.As(err, &se) || se.Status&^nvme.DNR != nvme.StatusFunctionRejected {
			t.Fatalf("loading a bad module: %v, want Function Rejected", err)
		}
		msg := err.Error()
		if strings.Contains(msg, "sandbox: bad module: ") || !strings.Contains(msg, ": ") {
			t.Fatalf("no reason, or the sentinel's prefix kept: %q", msg)
		}
		t.Log(msg)
	}
	page := make([]byte, nvme.RefusalLogSize)
	if err := e.ctrl.GetLogPage(ctx, nvme.LogFunctionRefusals, 0, page, 0); err != nil {
		t.Fatal(err)
	}
	rs, err := nvme.UnmarshalFunctionRefusals(page)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].ID != sandbox.IDOf(bad[1]) || rs[1].ID != sandbox.IDOf(bad[0]) || rs[0].Number != rs[1].Number+1 {
		t.Fatalf("refusals log: %+v", rs)
	}
	errLog := make([]byte, 64)
	if err := e.ctrl.GetLogPage(ctx, nvme.LogError, 0, errLog, 0); err != nil {
		t.Fatal(err)
	}
	if errLog[28] != nvme.LogFunctionRefusals || binary.LittleEndian.Uint16(errLog[12:])>>1 != uint16(nvme.StatusFunctionRejected|nvme.DNR) {
		t.Fatalf("newest error log entry: vendor log %#x, status %#x", errLog[28], binary.LittleEndian.Uint16(errLog[12:])>>1)
	}
}

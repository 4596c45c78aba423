package functions_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/sandbox"
)

// TestLoadProgram: Function Load's program name (CDW12 bits 7:0, the name
// after the module in the data) picks one program of an eBPF object that
// holds several, under ID sandbox.ProgramID; without a name such an object
// is refused with a reason naming its programs; a runtime that takes no
// names (wasm) refuses one; reserved CDW12 bits are Invalid Field.
func TestLoadProgram(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	obj, err := os.ReadFile(filepath.Join("..", "..", "sandbox", "ebpf", "testdata", "xrp_two.o"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.ctrl.LoadFunction(ctx, obj)
	var re *host.RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Reason, "2 programs") {
		t.Fatalf("an object of two programs, none named: %v", err)
	}
	ids := map[string]sandbox.ID{}
	for _, p := range []string{"get", "range"} {
		id, err := e.ctrl.LoadProgram(ctx, obj, p)
		if err != nil {
			t.Fatalf("program %s: %v", p, err)
		}
		if id != sandbox.ProgramID(obj, p) {
			t.Fatalf("program %s: ID %s, want ProgramID's", p, id)
		}
		ids[p] = id
	}
	if ids["get"] == ids["range"] || ids["get"] == sandbox.IDOf(obj) {
		t.Fatal("programs of one object share an ID")
	}
	fs, err := e.ctrl.ListFunctions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range fs {
		if f.ID == ids["get"] || f.ID == ids["range"] {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("list shows %d of the 2 programs", found)
	}
	wasmMod, err := functions.Module("stats64", sandbox.KindWasm)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.ctrl.LoadProgram(ctx, wasmMod, "compute")
	if !errors.As(err, &re) || !strings.Contains(re.Reason, "no program name") {
		t.Fatalf("a program name for wasm: %v", err)
	}
	cmd := nvme.Command{Opcode: nvme.AdminFunctionLoad, CDW10: uint32(sandbox.KindEBPF), CDW11: uint32(len(obj)), CDW12: 1 << 8}
	if _, err := e.ctrl.Admin(ctx, &cmd, obj, nil); !errors.Is(err, &nvme.StatusError{Status: nvme.StatusInvalidField | nvme.DNR}) {
		t.Fatalf("reserved CDW12 bits: %v, want Invalid Field", err)
	}
}

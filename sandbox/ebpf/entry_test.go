package ebpf

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/sandbox"
)

// TestEntryRules checks how Load and LoadProgram pick an object's entry
// points (the rules on entries): which program each call runs, found by
// the mark it leaves in scratch, or the refusal and what it names.
func TestEntryRules(t *testing.T) {
	for _, tc := range []struct {
		name, file, program string
		// mark is the first u64 the pushdown entry leaves in scratch;
		// 0: no pushdown entry expected.
		mark    uint64
		compute bool
		// want, if set: the load is refused with ErrBadModule and a
		// message holding every one of these.
		want []string
	}{
		{name: "single program in its own section", file: "xrp_agg.o", mark: 0xa99},
		{name: "single program named", file: "xrp_agg.o", program: "oliver_agg_func", mark: 0xa99},
		{name: "XRP SEC(prog)", file: "xrp_prog.o", mark: 1234},
		{name: "nearstore pushdown by name", file: "xrp_chain.o", mark: 0},
		{name: "two programs, none named", file: "xrp_two.o",
			want: []string{"2 programs", `"get" (section "xrp/get")`, `"range" (section "xrp/range")`, "name the one"}},
		{name: "two programs, get named", file: "xrp_two.o", program: "get", mark: 1},
		{name: "two programs, range named", file: "xrp_two.o", program: "range", mark: 2},
		{name: "unknown name", file: "xrp_two.o", program: "scan",
			want: []string{`no program named "scan"`, `"get" (section "xrp/get")`}},
		{name: "name of a section, not a program", file: "xrp_two.o", program: "xrp/get",
			want: []string{`no program named "xrp/get"`}},
		{name: "compute beside one program", file: "compute_xrp.o", mark: 3, compute: true},
		{name: "compute named as pushdown", file: "compute_xrp.o", program: "compute",
			want: []string{`program "compute" is the compute entry`}},
		{name: "compute only", file: "stats64.o", compute: true},
		{name: "only .text", file: "text_only.o", want: []string{"no entry point", ".text"}},
		{name: "name too long", file: "xrp_agg.o", program: strings.Repeat("p", sandbox.MaxProgramName+1),
			want: []string{"at most 255"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			obj := readObj(t, tc.file)
			m, err := testRuntime().LoadProgram(ctx, obj, tc.program, sandbox.Limits{Time: testTime})
			if tc.want != nil {
				if !errors.Is(err, sandbox.ErrBadModule) {
					t.Fatalf("got %v, want ErrBadModule", err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%v\ndoes not mention %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(ctx)
			if m.ID() != sandbox.ProgramID(obj, tc.program) {
				t.Errorf("ID %s, want ProgramID(obj, %q)", m.ID(), tc.program)
			}
			if m.HasCompute() != tc.compute {
				t.Errorf("HasCompute %v, want %v", m.HasCompute(), tc.compute)
			}
			wantPush := tc.mark != 0 || tc.file == "xrp_chain.o"
			if m.HasPushdown() != wantPush {
				t.Fatalf("HasPushdown %v, want %v", m.HasPushdown(), wantPush)
			}
			if tc.mark == 0 {
				return
			}
			scratch, _, err := runPushdown(t, m, [][]byte{make([]byte, 4096)}, sandbox.Next{Len: 1234})
			if err != nil {
				t.Fatal(err)
			}
			if got := binary.LittleEndian.Uint64(scratch); got != tc.mark {
				t.Errorf("the pushdown entry left %#x, want %#x (another program ran)", got, tc.mark)
			}
		})
	}
}

// TestProgramID checks that naming a program gives a function of its own:
// the same object under two names, or named and unnamed, never shares an
// ID, and no program's ID is a module's plain IDOf.
func TestProgramID(t *testing.T) {
	obj := readObj(t, "xrp_two.o")
	ids := map[sandbox.ID]string{}
	for _, name := range []string{"", "get", "range", "ge", "t"} {
		id := sandbox.ProgramID(obj, name)
		if prev, dup := ids[id]; dup {
			t.Errorf("programs %q and %q share ID %s", prev, name, id)
		}
		ids[id] = name
	}
	if sandbox.ProgramID(obj, "") != sandbox.IDOf(obj) {
		t.Error("the unnamed program's ID is not the module's IDOf")
	}
	// The length prefix keeps name and module apart: "ab"+obj is not
	// "a"+("b"+obj).
	if sandbox.ProgramID(obj, "ab") == sandbox.ProgramID(append([]byte("b"), obj...), "a") {
		t.Error("name and module bytes run together")
	}
}

// TestBPFoFNames runs a program written with BPF-oF's field names
// (fd_arr, cur_fd; nearstore.h's aliases of next_file, cur_file): each
// step it asks for the next read in the file data came from, so a chain
// started in file 1 must stay in file 1, though file 0 holds a different
// chain at the same offsets.
func TestBPFoFNames(t *testing.T) {
	m := loadObj(t, "bpfof_names.o", sandbox.Limits{})
	le := binary.LittleEndian
	f0, f1 := make([]byte, 512), make([]byte, 512)
	le.PutUint64(f0[64:], 0)   // file 0 ends at once
	le.PutUint64(f1[64:], 128) // file 1: 64 -> 128 -> 256 -> end
	le.PutUint64(f1[128:], 256)
	le.PutUint64(f1[256:], 0)
	scratch, steps, err := runPushdown(t, m, [][]byte{f0, f1}, sandbox.Next{File: 1, Offset: 64, Len: 8})
	if err != nil {
		t.Fatal(err)
	}
	if hops := le.Uint64(scratch); steps != 3 || hops != 3 {
		t.Fatalf("steps %d, hops %d; want 3 and 3", steps, hops)
	}
	for i := range 3 {
		if fd := le.Uint64(scratch[8+8*i:]); fd != 1 {
			t.Errorf("hop %d: cur_fd %d, want 1", i, fd)
		}
	}
}

package lsm

import (
	"errors"
	"reflect"
	"testing"
)

func sampleCompactArgs() *CompactArgs {
	return &CompactArgs{
		Task: CompactionTask{
			Inputs: []CompactionInput{
				{Level: 0, Files: []*FileMeta{{FileNum: 12, Size: 4000}, {FileNum: 9, Size: 3000}}},
				{Level: 1, Files: []*FileMeta{{FileNum: 4, Size: 70000}}},
			},
			OutputLevel:    1,
			Snapshots:      []SeqNum{5, 90},
			DropDeletes:    true,
			TargetFileSize: 1 << 21,
			Table:          TableOptions{BlockSize: 4096, BlockRestartInterval: 16, BloomBitsPerKey: -1},
		},
		Outputs: []uint64{20, 21, 22},
	}
}

func TestCompactArgsRoundTrip(t *testing.T) {
	a := sampleCompactArgs()
	b := a.Encode(nil)
	if len(b) != compactArgsHeader+3*compactArgsInput+3*8+2*8 {
		t.Fatalf("%d bytes", len(b))
	}
	got, err := DecodeCompactArgs(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("decoded %+v, want %+v", got, a)
	}
}

// TestCompactArgsRejects: each corruption of a good encoding is refused
// with errBadArgs.
func TestCompactArgsRejects(t *testing.T) {
	good := sampleCompactArgs().Encode(nil)
	for _, tc := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:20] }},
		{"magic", func(b []byte) []byte { b[0] ^= 1; return b }},
		{"version", func(b []byte) []byte { b[4] = 2; return b }},
		{"output level 0", func(b []byte) []byte { b[5] = 0; return b }},
		{"output level 7", func(b []byte) []byte { b[5] = NumLevels; return b }},
		{"flags", func(b []byte) []byte { b[6] |= 2; return b }},
		{"reserved", func(b []byte) []byte { b[7] = 1; return b }},
		{"no outputs", func(b []byte) []byte { b[30], b[31] = 0, 0; return b }},
		{"too many files", func(b []byte) []byte { b[30] = 14; return b }},
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }},
		{"input below output", func(b []byte) []byte { b[compactArgsHeader+2*compactArgsInput] = 2; return b }},
		{"levels out of order", func(b []byte) []byte { b[compactArgsHeader] = 1; return b }},
		{"file named twice", func(b []byte) []byte {
			copy(b[compactArgsHeader+3*compactArgsInput:], b[compactArgsHeader+1:compactArgsHeader+9])
			return b
		}},
		{"snapshots unsorted", func(b []byte) []byte { b[len(b)-8] = 1; return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.edit(append([]byte(nil), good...))
			if _, err := DecodeCompactArgs(b); !errors.Is(err, errBadArgs) {
				t.Fatalf("err %v, want errBadArgs", err)
			}
		})
	}
}

func TestOutputPlan(t *testing.T) {
	for _, tc := range []struct {
		total, target uint64
		slots         int
		cut           uint64
		n             int
	}{
		{total: 10 << 20, target: 2 << 20, slots: 10, cut: 2 << 20, n: 6},
		{total: 10 << 20, target: 2 << 20, slots: 4, cut: (10<<20 + 2) / 3, n: 4},
		{total: 10 << 20, target: 0, slots: 4, cut: (10<<20 + 2) / 3, n: 4},
		{total: 10 << 20, target: 2 << 20, slots: 1, cut: 0, n: 1},
		{total: 0, target: 2 << 20, slots: 5, cut: 2 << 20, n: 1},
	} {
		cut, n := outputPlan(tc.total, tc.target, tc.slots)
		if cut != tc.cut || n != tc.n {
			t.Errorf("outputPlan(%d, %d, %d) = %d, %d; want %d, %d", tc.total, tc.target, tc.slots, cut, n, tc.cut, tc.n)
		}
		if n > tc.slots {
			t.Errorf("outputPlan(%d, %d, %d): %d outputs for %d slots", tc.total, tc.target, tc.slots, n, tc.slots)
		}
	}
}

func FuzzCompactArgs(f *testing.F) {
	f.Add(sampleCompactArgs().Encode(nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeCompactArgs(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes, and names at most
		// a request's files.
		if got := a.Encode(nil); string(got) != string(b) {
			t.Fatalf("re-encoded %x, decoded from %x", got, b)
		}
		if a.NumInputs()+len(a.Outputs) > 16 {
			t.Fatalf("%d files", a.NumInputs()+len(a.Outputs))
		}
	})
}

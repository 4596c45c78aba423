package nvme

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFunctionRefusalRoundTrip(t *testing.T) {
	page := make([]byte, RefusalLogSize)
	long := strings.Repeat("é", 300) // 600 bytes: cut at a character boundary
	in := []FunctionRefusal{
		{ID: [32]byte{1}, Number: 9, Status: StatusFunctionRejected | DNR, Reason: "section 3: bad type"},
		{ID: [32]byte{2}, Number: 8, Status: StatusMetadataLimit, Reason: long},
	}
	for i := range in {
		in[i].Marshal(page[i*RefusalEntrySize:])
	}
	out, err := UnmarshalFunctionRefusals(page)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].Number != 9 || out[0].Status != StatusFunctionRejected || out[0].Reason != in[0].Reason || out[0].ID != in[0].ID {
		t.Fatalf("decoded %+v", out)
	}
	if r := out[1].Reason; len(r) > MaxRefusalReason || !utf8.ValidString(r) || !strings.HasPrefix(long, r) || len(r) < MaxRefusalReason-1 {
		t.Fatalf("long reason cut to %d bytes", len(r))
	}
}

// FuzzFunctionRefusals: the host decodes whatever page a target sends
// without panicking, and what it decodes encodes back to the same entries.
func FuzzFunctionRefusals(f *testing.F) {
	page := make([]byte, RefusalLogSize)
	(&FunctionRefusal{ID: [32]byte{7}, Number: 1, Status: StatusFunctionRejected, Reason: "bad"}).Marshal(page)
	f.Add(page)
	f.Add(make([]byte, RefusalEntrySize))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := UnmarshalFunctionRefusals(b)
		if err != nil {
			return
		}
		for _, r := range out {
			e := make([]byte, RefusalEntrySize)
			r.Marshal(e)
			back, err := UnmarshalFunctionRefusals(e)
			if err != nil || len(back) != 1 || back[0] != r {
				t.Fatalf("%+v does not round-trip: %+v, %v", r, back, err)
			}
		}
	})
}

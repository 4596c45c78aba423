package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchLinkCommand runs "nearstore bench link" briefly: it measures
// both paths both ways, and its report says whether the shaped path was
// really shaped and why not.
func TestBenchLinkCommand(t *testing.T) {
	root := newRoot(&globals{})
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"bench", "link", "--rate", "2gbit", "--duration", "200ms", "--repeat", "2", "--json"})
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var rep linkReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if rep.Asked != "2gbit" || rep.AskedBps != 2e9 || rep.Repeat != 2 || len(rep.Results) != 4 {
		t.Fatalf("report %+v", rep)
	}
	if rep.Shaped == (rep.Fallback != "") || rep.Shaped != strings.HasPrefix(rep.Link, "2gbit (tc tbf") {
		t.Errorf("shaped %v, fallback %q, link %q disagree", rep.Shaped, rep.Fallback, rep.Link)
	}
	for _, s := range rep.Results {
		if len(s.Runs) != 2 || s.Gbps <= 0 {
			t.Errorf("%s %s: %+v", s.Path, s.Direction, s)
		}
		if (s.Path == "shaped") != (s.Ratio > 0) {
			t.Errorf("%s %s: ratio %v", s.Path, s.Direction, s.Ratio)
		}
	}

	root = newRoot(&globals{})
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"bench", "link", "--rate", "10gb"})
	if err := root.ExecuteContext(t.Context()); err == nil || !strings.Contains(err.Error(), "--rate") {
		t.Errorf("a malformed rate gave %v", err)
	}
}

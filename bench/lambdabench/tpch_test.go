package lambdabench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nearstore/nearstore/lambda"
)

// TestRunTPCH runs the four queries end to end at a small scale factor,
// in-process, in all four modes; every run's finished answer is checked
// against tpch.Evaluate over a plain read of the file by RunTPCH itself.
func TestRunTPCH(t *testing.T) {
	for _, q := range []int{1, 6, 12, 14} {
		t.Run(map[int]string{1: "Q1", 6: "Q6", 12: "Q12", 14: "Q14"}[q], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var last, total int64
			rep, err := RunTPCH(ctx, TPCHConfig{
				SF: 0.005, Query: q, RequestSize: 64 << 10, Repeat: 1, Warm: 0.3, WarmRandom: q%2 == 0,
				GenProgress: func(done, n int64) { last, total = done, n },
			})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Rows == 0 || rep.Size != rep.Rows*64 || last != total || total != rep.Size {
				t.Errorf("rows %d, size %d, generation progress %d of %d", rep.Rows, rep.Size, last, total)
			}
			if !strings.Contains(rep.Query, "Q") || rep.Answer == "" {
				t.Errorf("query %q, answer %q", rep.Query, rep.Answer)
			}
			if len(rep.Modes) != 4 {
				t.Fatalf("%d modes", len(rep.Modes))
			}
			for _, m := range rep.Modes {
				if m.Mode == lambda.Target.String() && m.Ran[m.Mode] == 0 {
					t.Errorf("mode T: no call ran at the target: %v", m.Ran)
				}
			}
		})
	}
}

func TestRunTPCHBadQuery(t *testing.T) {
	if _, err := RunTPCH(context.Background(), TPCHConfig{SF: 0.001, Query: 3}); err == nil {
		t.Error("query 3 ran")
	}
	if _, err := RunTPCH(context.Background(), TPCHConfig{SF: 0.001, Query: 6, RequestSize: 1000}); err == nil {
		t.Error("a request size that is not whole rows ran")
	}
}

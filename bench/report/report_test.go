package report

import (
	"strings"
	"testing"
	"text/tabwriter"
)

// TestWriteTableBars: the table comes out aligned, whole, before the
// bars, each bar saying whether it was met.
func TestWriteTableBars(t *testing.T) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	tw.Write([]byte("mode\trate\nhost\t1.0\n"))
	bars := []Bar{{What: "speedup", Want: ">= 1.5", Got: 2, Met: true}, {What: "cpu", Want: "<= 0.5", Got: 0.75}}
	if err := WriteTableBars(&b, tw, bars); err != nil {
		t.Fatal(err)
	}
	want := "mode  rate\nhost  1.0\n" +
		"\nbar: speedup: want >= 1.5, got 2.000: met" +
		"\nbar: cpu: want <= 0.5, got 0.750: MISSED\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

package target

import (
	"bytes"
	"context"
	"testing"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/pushdown"
)

// TestResultTargetTime: a λ read's result carries the time the target
// spent on it (bytes 28-31), never 0 for a request the target ran.
func TestResultTargetTime(t *testing.T) {
	_, _, _, ns, fn := echoServer(t, Config{})
	ctx := context.Background()
	disk := fill(t, ns, 32, 3)
	raw := pushdown.File{Size: 32 * 512, Extents: []pushdown.Extent{x(0, 32)}}
	for range 3 {
		res, err := ns.LambdaRead(ctx, fn, []pushdown.File{raw}, host.Start{Length: 4096}, nil, 8192)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(res.Output, disk[:4096]) {
			t.Fatal("echo output differs")
		}
		if res.TargetMicros == 0 {
			t.Fatal("λ read result without the target's time")
		}
	}
}

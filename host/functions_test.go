package host

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

// TestPushdownResultFromSentBytes checks that a Pushdown Read's result is
// read only from the bytes the controller sent: its result buffers are
// recycled without being cleared, so a controller that claims more output
// than it sends must get an error, not an earlier command's output. It
// also checks that PushdownInto delivers the Output in the caller's
// buffer.
func TestPushdownResultFromSentBytes(t *testing.T) {
	ft := newFakeTarget(t)
	output := bytes.Repeat([]byte("earlier result "), 20)
	var n atomic.Int32
	ft.setHook(func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
		if fc.qid == 0 || cmd.Opcode != nvme.IOPushdownRead {
			return false
		}
		full := make([]byte, pushdown.ResultSize+len(output))
		res := pushdown.Result{Done: true, Output: output}
		res.Marshal(full)
		if n.Add(1) > 2 {
			full = full[:pushdown.ResultSize] // the header alone, still claiming the output
		}
		fc.sendData(cmd.CID, full)
		return true
	})
	c := connectFake(t, ft, Options{IOQueues: 1})
	ns := c.Namespaces()[0]
	ctx := context.Background()
	var fn sandbox.ID
	res, err := ns.Pushdown(ctx, fn, []pushdown.File{ns.RawFile()}, Start{Length: 512}, []byte("scratch"))
	if err != nil || !bytes.Equal(res.Output, output) {
		t.Fatalf("first pushdown: %v, output %q", err, res.Output)
	}
	buf := make([]byte, sandbox.ScratchSize)
	res, err = ns.PushdownInto(ctx, fn, []pushdown.File{ns.RawFile()}, Start{Length: 512}, []byte("scratch"), buf)
	if err != nil || !bytes.Equal(res.Output, output) || &res.Output[0] != &buf[0] {
		t.Fatalf("pushdown into a buffer: %v, output %q (in the buffer: %v)", err, res.Output, err == nil && &res.Output[0] == &buf[0])
	}
	for range 4 {
		res, err = ns.Pushdown(ctx, fn, []pushdown.File{ns.RawFile()}, Start{Length: 512}, []byte("scratch"))
		if !errors.Is(err, pushdown.ErrMalformed) {
			t.Fatalf("pushdown whose result is short of its claimed output: %v, output %q; want ErrMalformed", err, res.Output)
		}
	}
}

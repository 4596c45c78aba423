package host

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
)

// fuzzCalls are the commands in flight when the fuzzed bytes arrive; they
// get CIDs 0..3 in this order.
func fuzzCalls() []*Call {
	return []*Call{
		{Cmd: nvme.Command{Opcode: nvme.IORead}, In: make([]byte, 1024)},
		{Cmd: nvme.Command{Opcode: nvme.IORead}, In: make([]byte, 4096)},
		{Cmd: nvme.Command{Opcode: nvme.IOWrite}, Out: make([]byte, 8192)},
		{Cmd: nvme.Command{Opcode: nvme.IOFlush}},
	}
}

// controllerPDUs renders PDUs as a controller with the given digests would
// send them, for the seed corpus.
func controllerPDUs(digests byte, fn func(f *tcp.Framer)) []byte {
	var b bytes.Buffer
	f := tcp.NewFramer(&b, tcp.RoleController, 1<<16)
	f.HeaderDigest, f.DataDigest = digests&1 != 0, digests&2 != 0
	fn(f)
	_ = f.Flush()
	return b.Bytes()
}

func FuzzHostReceive(f *testing.F) {
	for d := range byte(4) {
		f.Add(d, controllerPDUs(d, func(f *tcp.Framer) {
			_ = f.WriteCapsuleResp(&nvme.Completion{CID: 3})
			_ = f.WriteC2HData(tcp.DataHeader{CCCID: 0}, true, true, make([]byte, 1024))
			_ = f.WriteC2HData(tcp.DataHeader{CCCID: 1, Offset: 0}, false, false, make([]byte, 2048))
			_ = f.WriteC2HData(tcp.DataHeader{CCCID: 1, Offset: 2048}, true, false, make([]byte, 2048))
			_ = f.WriteCapsuleResp(&nvme.Completion{CID: 1, Status: nvme.StatusMediaReadError})
			_ = f.WriteR2T(tcp.DataHeader{CCCID: 2, TTag: 5, Offset: 0, Length: 8192})
			_ = f.WriteCapsuleResp(&nvme.Completion{CID: 2})
		}))
	}
	f.Add(byte(0), controllerPDUs(0, func(f *tcp.Framer) {
		_ = f.WriteR2T(tcp.DataHeader{CCCID: 2, Offset: 4096, Length: 8192})
	}))
	f.Add(byte(0), controllerPDUs(0, func(f *tcp.Framer) {
		_ = f.WriteC2HData(tcp.DataHeader{CCCID: 9}, true, true, make([]byte, 16))
	}))
	f.Add(byte(0), controllerPDUs(0, func(f *tcp.Framer) {
		_ = f.WriteTermReq(tcp.TermReq{FES: tcp.FESInvalidHeaderField}, make([]byte, 24))
	}))
	f.Add(byte(1), []byte{tcp.TypeCapsuleResp, 0, 24, 0, 255, 255, 255, 255})
	f.Add(byte(0), []byte{})

	f.Fuzz(runFuzzOne)
}

func runFuzzOne(t *testing.T, digests byte, data []byte) {
	watchdog := time.AfterFunc(20*time.Second, func() {
		buf := make([]byte, 1<<20)
		panic("FuzzHostReceive hung:\n" + string(buf[:runtime.Stack(buf, true)]))
	})
	defer watchdog.Stop()
	{
		hostSide, peer := net.Pipe()
		var wg sync.WaitGroup
		q := newQueue(hostSide, queueConfig{qid: 1, cids: 4, log: slog.New(slog.DiscardHandler), st: &stats{}, wg: &wg})
		q.fr.HeaderDigest, q.fr.DataDigest = digests&1 != 0, digests&2 != 0
		q.maxH2C, q.inline = 4096, 1024
		q.setMaxIn(1 << 16)
		q.start()
		drained := make(chan struct{})
		go func() { drain(peer); close(drained) }()
		calls := fuzzCalls()
		ctx := context.Background()
		for _, c := range calls {
			c.Done = make(chan *Call, 1)
			if err := q.submit(ctx, c, false); err != nil {
				t.Fatalf("submit: %v", err)
			}
		}
		_, _ = peer.Write(data)
		_ = peer.Close()
		for i, c := range calls {
			select {
			case <-c.Done:
			case <-time.After(5 * time.Second):
				t.Fatalf("call %d never completed", i)
			}
			var se *nvme.StatusError
			if c.Err != nil && !errors.As(c.Err, &se) && !errors.Is(c.Err, ErrConnectionLost) {
				t.Errorf("call %d: unexpected error %v", i, c.Err)
			}
		}
		wg.Wait()
		<-drained
	}
}

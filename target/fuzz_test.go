package target

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/nvme/tcp"
	"github.com/nearstore/nearstore/volume"
)

// FuzzTargetConn feeds arbitrary bytes to a target queue after a valid
// ICReq, and optionally a valid Connect: the target must never panic, must
// stop serving the queue once the host goes away, and must shut down
// cleanly afterwards. The targeted cases (bad lengths, stray data, overrun)
// are in TestFatalPDUs; this finds the ones nobody thought of.
func FuzzTargetConn(f *testing.F) {
	seed := func(write func(fr *tcp.Framer)) []byte {
		var buf bytes.Buffer
		fr := tcp.NewFramer(&buf, tcp.RoleHost, 4096)
		write(fr)
		_ = fr.Flush()
		return buf.Bytes()
	}
	connect := seed(func(fr *tcp.Framer) {
		var cmd nvme.Command
		(&nvme.ConnectCommand{SQSize: 31}).ToCommand(&cmd)
		cmd.Flags = nvme.PSDTSGL
		cmd.DPTR = nvme.SGL{Length: 1024, Type: nvme.SGLDataBlockOffset}
		_ = fr.WriteCapsuleCmd(&cmd, (&nvme.ConnectData{CNTLID: 0xFFFF, SubNQN: testNQN, HostNQN: "h"}).Marshal())
	})
	f.Add([]byte{}, false)
	f.Add(connect, false)
	f.Add(seed(func(fr *tcp.Framer) {
		c := nvme.Command{Opcode: nvme.IOWrite, Flags: nvme.PSDTSGL, NSID: 1, DPTR: nvme.SGL{Length: 512, Type: nvme.SGLTransportDataBlock}}
		_ = fr.WriteCapsuleCmd(&c, nil)
		_ = fr.WriteH2CData(tcp.DataHeader{}, true, make([]byte, 512))
	}), true)
	f.Add(seed(func(fr *tcp.Framer) {
		c := nvme.Command{Opcode: nvme.AdminIdentify, Flags: nvme.PSDTSGL, CDW10: 1, DPTR: nvme.SGL{Length: 4096, Type: nvme.SGLTransportDataBlock}}
		_ = fr.WriteCapsuleCmd(&c, nil)
	}), true)

	f.Fuzz(func(t *testing.T, b []byte, connected bool) {
		v, err := volume.Open("mem:1MiB")
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Subsystems: []SubsystemConfig{{NQN: testNQN, Namespaces: []NamespaceConfig{{Backend: v}}}}, IdleTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		hostEnd, targetEnd := net.Pipe()
		q := newConn(s, targetEnd)
		done := make(chan struct{})
		go func() { q.serve(); close(done) }()
		// Drain whatever the target sends so it never blocks on the pipe.
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, err := hostEnd.Read(buf); err != nil {
					return
				}
			}
		}()
		_ = hostEnd.SetWriteDeadline(time.Now().Add(2 * time.Second))
		var pre bytes.Buffer
		fr := tcp.NewFramer(&pre, tcp.RoleHost, 4096)
		_ = fr.WriteICReq(tcp.ICReq{})
		_ = fr.Flush()
		if connected {
			pre.Write(connect)
		}
		_, _ = hostEnd.Write(pre.Bytes())
		_, _ = hostEnd.Write(b)
		hostEnd.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("queue did not stop after the host went away")
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

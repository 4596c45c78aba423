package host

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/nearstore/nearstore/nvme"
)

// TestWriteZeroesFallback: a controller that refuses Write Zeroes as
// unsupported (as the Linux target does on tmpfs) still gets its blocks
// zeroed, by ordinary writes, and only those blocks.
func TestWriteZeroesFallback(t *testing.T) {
	for _, st := range []nvme.Status{nvme.StatusONCSNotSupported | nvme.DNR, nvme.StatusInvalidOpcode | nvme.DNR} {
		t.Run(st.String(), func(t *testing.T) {
			ft := newFakeTarget(t)
			var refused atomic.Int32
			ft.setHook(func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
				if fc.qid != 0 && cmd.Opcode == nvme.IOWriteZeroes {
					refused.Add(1)
					fc.respond(cmd.CID, st, 0)
					return true
				}
				return false
			})
			c := connectFake(t, ft, Options{})
			ns := c.Namespaces()[0]
			bs := int64(ns.BlockSize())
			all := bytes.Repeat([]byte{0xA5}, int(12*bs))
			if _, err := ns.WriteAt(all, 0); err != nil {
				t.Fatal(err)
			}
			if err := ns.WriteZeroes(context.Background(), 2*bs, 8*bs); err != nil {
				t.Fatalf("write zeroes with fallback: %v", err)
			}
			if refused.Load() == 0 {
				t.Fatal("the Write Zeroes command was never tried")
			}
			got := ft.snapshot(0, int(12*bs))
			want := append(append(bytes.Repeat([]byte{0xA5}, int(2*bs)), make([]byte, 8*bs)...), bytes.Repeat([]byte{0xA5}, int(2*bs))...)
			if !bytes.Equal(got, want) {
				t.Fatal("the fallback zeroed the wrong bytes")
			}
		})
	}
}

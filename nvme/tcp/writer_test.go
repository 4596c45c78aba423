package tcp

import (
	"bytes"
	"errors"
	"testing"

	"github.com/nearstore/nearstore/nvme"
)

// countingWriter counts the writes that reach the connection.
type countingWriter struct {
	bytes.Buffer
	writes int
	fail   error
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.fail != nil {
		return 0, w.fail
	}
	w.writes++
	return w.Buffer.Write(p)
}

func TestWriterDeferFlush(t *testing.T) {
	conn := &countingWriter{}
	w := NewWriter(NewFramer(conn, RoleController, 64<<10))
	resp := func(cid uint16) func(*Framer) error {
		return func(f *Framer) error { return f.WriteCapsuleResp(&nvme.Completion{CID: cid}) }
	}
	for cid := range uint16(8) {
		if err := w.Defer(resp(cid)); err != nil {
			t.Fatal(err)
		}
	}
	if conn.writes != 0 || conn.Len() != 0 {
		t.Fatalf("Defer wrote %d times (%d bytes) before Flush", conn.writes, conn.Len())
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if conn.writes != 1 {
		t.Fatalf("8 deferred PDUs took %d writes, want 1", conn.writes)
	}
	// Nothing buffered: Flush writes nothing.
	if err := w.Flush(); err != nil || conn.writes != 1 {
		t.Fatalf("empty Flush: err %v, writes %d", err, conn.writes)
	}
	// Do sends what Defer left, in order, in the same write.
	if err := w.Defer(resp(8)); err != nil {
		t.Fatal(err)
	}
	if err := w.Do(resp(9)); err != nil {
		t.Fatal(err)
	}
	if conn.writes != 2 {
		t.Fatalf("Defer+Do took %d writes in all, want 2", conn.writes)
	}
	r := NewFramer(&conn.Buffer, RoleHost, 64<<10)
	for want := range uint16(10) {
		h, err := r.ReadHeader()
		if err != nil {
			t.Fatalf("PDU %d: %v", want, err)
		}
		if c := h.Completion(); c.CID != want {
			t.Fatalf("PDU %d has CID %d", want, h.Completion().CID)
		}
	}
}

func TestWriterStickyError(t *testing.T) {
	boom := errors.New("connection reset")
	conn := &countingWriter{fail: boom}
	w := NewWriter(NewFramer(conn, RoleController, 64<<10))
	nop := func(f *Framer) error { return f.WriteCapsuleResp(&nvme.Completion{}) }
	if err := w.Do(nop); !errors.Is(err, boom) {
		t.Fatalf("Do: %v, want %v", err, boom)
	}
	conn.fail = nil
	for name, call := range map[string]func() error{
		"Do":    func() error { return w.Do(nop) },
		"Defer": func() error { return w.Defer(nop) },
		"Flush": w.Flush,
	} {
		if err := call(); !errors.Is(err, boom) {
			t.Errorf("%s after a failed write: %v, want %v", name, err, boom)
		}
	}
}

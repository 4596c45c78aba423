package nvme

import (
	"bytes"
	"testing"
)

func TestKVKey(t *testing.T) {
	for _, key := range [][]byte{{1}, []byte("sixteen-byte-key"), []byte("abcdefgh9")} {
		var c Command
		c.CDW11 = 0x0200 // options kept
		if err := c.SetKVKey(key); err != nil {
			t.Fatal(err)
		}
		got, ok := c.KVKey()
		if !ok || !bytes.Equal(got, key) || c.KVOptions() != 2 {
			t.Fatalf("%q: got %q %v options %d", key, got, ok, c.KVOptions())
		}
		// Through the wire encoding.
		b := make([]byte, CommandSize)
		c.Marshal(b)
		var d Command
		d.Unmarshal(b)
		if got, _ := d.KVKey(); !bytes.Equal(got, key) {
			t.Fatalf("wire: %q", got)
		}
	}
	var c Command
	if err := c.SetKVKey(make([]byte, 17)); err == nil {
		t.Fatal("17-byte key accepted")
	}
	if _, ok := c.KVKey(); ok {
		t.Fatal("key length 0 accepted")
	}
}

func TestKVList(t *testing.T) {
	keys := [][]byte{[]byte("a"), []byte("bcd"), []byte("sixteen-byte-key"), []byte("xy")}
	b, n := MarshalKVList(keys, 4096)
	if n != 4 {
		t.Fatalf("took %d", n)
	}
	got, err := UnmarshalKVList(b)
	if err != nil || len(got) != 4 || !bytes.Equal(got[2], keys[2]) {
		t.Fatalf("%q %v", got, err)
	}
	// A small buffer takes what fits: 4 + 4 ("a") + 8 ("bcd").
	b, n = MarshalKVList(keys, 16)
	if n != 2 || len(b) != 16 {
		t.Fatalf("small buffer: %d keys, %d bytes", n, len(b))
	}
}

func FuzzUnmarshalKVList(f *testing.F) {
	b, _ := MarshalKVList([][]byte{[]byte("k1"), []byte("key-two")}, 64)
	f.Add(b)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := UnmarshalKVList(data)
		if err != nil {
			return
		}
		again, n := MarshalKVList(keys, len(data))
		if n != len(keys) {
			t.Fatalf("re-encoding took %d of %d keys", n, len(keys))
		}
		if _, err := UnmarshalKVList(again); err != nil {
			t.Fatal(err)
		}
	})
}

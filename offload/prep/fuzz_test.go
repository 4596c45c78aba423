package prep_test

import (
	"testing"

	"github.com/nearstore/nearstore/offload/prep"
)

// FuzzArgs: an engine decodes a task's arguments from any client; what
// decodes must encode back to the same bytes, and nothing panics.
func FuzzArgs(f *testing.F) {
	f.Add(prep.EncodeArgs(prep.Options{}, 1, 0))
	f.Add(prep.EncodeArgs(prep.Options{Size: 64, MaxRotate: 5}, 42, 1000))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, seed, first, err := prep.DecodeArgs(b)
		if err != nil {
			return
		}
		if o.TensorLen() <= 0 {
			t.Fatalf("decoded options with a tensor of %d values", o.TensorLen())
		}
		if got, _, _, err := prep.DecodeArgs(prep.EncodeArgs(o, seed, first)); err != nil || got.Size != o.Size {
			t.Fatalf("re-encoded arguments: %+v, %v", got, err)
		}
	})
}

// FuzzTensors: a host decodes an engine's output; only whole images
// decode, and nothing panics.
func FuzzTensors(f *testing.F) {
	o := prep.Options{Size: 4}
	f.Add(make([]byte, o.PixelLen()))
	f.Add(make([]byte, o.PixelLen()+1))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := prep.Tensors(b, o)
		if (err == nil) != (len(b)%o.PixelLen() == 0) {
			t.Fatalf("%d bytes: %v", len(b), err)
		}
		if err == nil && len(ts)*o.PixelLen() != len(b) {
			t.Fatalf("%d bytes gave %d tensors", len(b), len(ts))
		}
	})
}

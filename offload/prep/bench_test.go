package prep_test

import (
	"bytes"
	"image"
	"testing"

	"github.com/nearstore/nearstore/offload/prep"
)

// BenchmarkDecode and BenchmarkProcess split an image's cost between
// decoding and the rest of the pipeline (crop, flip, rotation, resize,
// normalisation), on a synthetic JPEG of about 500×375.
func BenchmarkDecode(b *testing.B) {
	data := jpegSample(b)
	for b.Loop() {
		if _, _, err := image.Decode(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProcess(b *testing.B) {
	data := jpegSample(b)
	o := prep.Options{}
	dst := make([]float32, o.TensorLen())
	var i uint64
	for b.Loop() {
		i++
		if err := o.Process(data, 1, i, dst); err != nil {
			b.Fatal(err)
		}
	}
}

func jpegSample(b *testing.B) []byte {
	for i := uint64(0); ; i++ {
		data, ext, err := prep.Synthetic(1, i)
		if err != nil {
			b.Fatal(err)
		}
		if ext == ".jpg" {
			return data
		}
	}
}

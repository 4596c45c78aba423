package prep_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/png"
	"math"
	"slices"
	"testing"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offload/prep"
)

// identity keeps the whole image, unrotated: with a source of the output's
// size, each output pixel is exactly one source pixel.
var identity = prep.Options{Size: 24, ScaleMin: 1, ScaleMax: 1, RatioMin: 1, RatioMax: 1, FlipP: -1, MaxRotate: -1}

func pngOf(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// testImage has a distinct colour at every pixel.
func testImage(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.NRGBA{uint8(10 * x), uint8(10 * y), uint8(3*x + 7*y), 255})
		}
	}
	return img
}

// TestProcessAgainstPixels checks the tensor against the source pixels
// directly: layout (CHW), normalisation, and the flip.
func TestProcessAgainstPixels(t *testing.T) {
	img := testImage(24, 24)
	data := pngOf(t, img)
	mean, std := [3]float32{0.485, 0.456, 0.406}, [3]float32{0.229, 0.224, 0.225}
	for _, flip := range []bool{false, true} {
		o := identity
		if flip {
			o.FlipP = 1
		}
		got := make([]float32, o.TensorLen())
		if err := o.Process(data, 1, 2, got); err != nil {
			t.Fatal(err)
		}
		for y := range 24 {
			for x := range 24 {
				sx := x
				if flip {
					sx = 23 - x
				}
				p := img.NRGBAAt(sx, y)
				for c, v := range []uint8{p.R, p.G, p.B} {
					want := (float32(v)/255 - mean[c]) / std[c]
					if g := got[c*24*24+y*24+x]; math.Abs(float64(g-want)) > 1e-4 {
						t.Fatalf("flip %v: channel %d at (%d,%d) = %v, want %v", flip, c, x, y, g, want)
					}
				}
			}
		}
	}
}

// TestProcessDeterministic: the same seed and index give the same
// tensor; another index another one (the draws differ).
func TestProcessDeterministic(t *testing.T) {
	data, _, err := prep.Synthetic(7, 3)
	if err != nil {
		t.Fatal(err)
	}
	o := prep.Options{Size: 32}
	a, b, c := make([]float32, o.TensorLen()), make([]float32, o.TensorLen()), make([]float32, o.TensorLen())
	for _, r := range []struct {
		dst   []float32
		index uint64
	}{{a, 5}, {b, 5}, {c, 6}} {
		if err := o.Process(data, 99, r.index, r.dst); err != nil {
			t.Fatal(err)
		}
	}
	if !equal(a, b) {
		t.Fatal("the same seed and index gave two tensors")
	}
	if equal(a, c) {
		t.Fatal("two indexes gave one tensor")
	}
}

func equal(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

func TestArgs(t *testing.T) {
	o := prep.Options{Size: 64, MaxRotate: 5}
	got, seed, first, err := prep.DecodeArgs(prep.EncodeArgs(o, 42, 1000))
	if err != nil || seed != 42 || first != 1000 || got.Size != 64 || got.MaxRotate != 5 || got.FlipP != 0.5 {
		t.Fatalf("%+v %d %d %v", got, seed, first, err)
	}
	bad := prep.EncodeArgs(o, 1, 1)
	bad[0] = 0 // size 0
	if _, _, _, err := prep.DecodeArgs(bad); err == nil {
		t.Fatal("size 0 accepted")
	}
	if _, _, _, err := prep.DecodeArgs(bad[:10]); err == nil {
		t.Fatal("short arguments accepted")
	}
}

func TestProcessRefusesGarbage(t *testing.T) {
	dst := make([]float32, identity.TensorLen())
	for _, data := range [][]byte{nil, []byte("not an image"), pngOf(t, testImage(3, 3))[:40]} {
		if err := identity.Process(data, 1, 1, dst); !errors.Is(err, prep.ErrDecode) {
			t.Fatalf("%q: %v, want ErrDecode", data, err)
		}
	}
}

// TestTaskMatchesHost: the prep task, run by an engine over the images'
// extents, returns exactly the tensors the host computes.
func TestTaskMatchesHost(t *testing.T) {
	ctx := context.Background()
	dev := testfs.Device(t, "mem:64MiB")
	fsys := testfs.Fresh(t, dev)
	if err := prep.Generate(ctx, fsys, "/set", 5, 3, nil); err != nil {
		t.Fatal(err)
	}
	names, err := prep.List(fsys, "/set")
	if err != nil || len(names) != 5 {
		t.Fatalf("%v %v", names, err)
	}
	o := prep.Options{Size: 48}
	tasks := offload.NewRegistry()
	if err := prep.Register(tasks); err != nil {
		t.Fatal(err)
	}
	e, err := offload.NewEngine(offload.Config{HostNQN: "h", Device: dev, Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	req := offload.Request{Task: prep.TaskName, Args: prep.EncodeArgs(o, 11, 100)}
	var want [][]float32
	for i, n := range names {
		f, err := fsys.Open(n)
		if err != nil {
			t.Fatal(err)
		}
		m, err := f.Extents()
		if err != nil {
			t.Fatal(err)
		}
		req.Files = append(req.Files, offload.File{File: m})
		data := make([]byte, m.Size)
		if _, err := f.ReadAt(data, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		ts := make([]float32, o.TensorLen())
		if err := o.Process(data, 11, 100+uint64(i), ts); err != nil {
			t.Fatal(err)
		}
		want = append(want, ts)
	}
	res, err := e.Run(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := prep.Tensors(res.Output, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !equal(got[i], want[i]) {
			t.Fatalf("image %d: the engine's tensor differs from the host's", i)
		}
	}
}

// TestTensors: a task's output decodes only as whole images, each
// normalised as Process normalises.
func TestTensors(t *testing.T) {
	o := prep.Options{Size: 4}
	data, _, err := prep.Synthetic(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	pix := make([]uint8, o.PixelLen())
	if err := o.ProcessPixels(data, 5, 6, pix); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, o.TensorLen())
	if err := o.Process(data, 5, 6, want); err != nil {
		t.Fatal(err)
	}
	got, err := prep.Tensors(append(slices.Clone(pix), pix...), o)
	if err != nil || len(got) != 2 || !equal(got[0], want) || !equal(got[1], want) {
		t.Fatalf("two images: %d tensors, %v", len(got), err)
	}
	for _, n := range []int{1, o.PixelLen() - 1, o.PixelLen() + 1} {
		if _, err := prep.Tensors(make([]byte, n), o); err == nil {
			t.Errorf("%d bytes decoded", n)
		}
	}
	if ts, err := prep.Tensors(nil, o); err != nil || len(ts) != 0 {
		t.Errorf("no bytes: %d tensors, %v", len(ts), err)
	}
}

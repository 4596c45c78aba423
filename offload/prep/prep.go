// Package prep is OffloadPrep: an image preprocessing pipeline — decode
// JPEG or PNG, random resized crop, horizontal flip, rotation, normalise
// to a float32 CHW tensor — that runs on the host, as an offload task on
// the storage node or a peer, or split across them, with the same result
// wherever an image went: each image's random draws come from the run's
// seed and the image's index alone.
package prep

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // the decoders image.Decode uses
	_ "image/png"
	"math"
	"math/rand/v2"
)

// Options configure the pipeline. The zero value of a field takes the
// default noted (torchvision's RandomResizedCrop defaults, ImageNet's
// mean and standard deviation).
type Options struct {
	// Size is the output's side in pixels (224).
	Size int
	// ScaleMin and ScaleMax bound the crop's share of the image's area
	// (0.08, 1); RatioMin and RatioMax its aspect ratio (3/4, 4/3).
	ScaleMin, ScaleMax float64
	RatioMin, RatioMax float64
	// FlipP is the chance of a horizontal flip (0.5; negative: never).
	FlipP float64
	// MaxRotate bounds the rotation, in degrees either way (10;
	// negative: none).
	MaxRotate float64
	// Mean and Std normalise each channel of [0, 1] values.
	Mean, Std [3]float32
}

// withDefaults fills zero fields.
func (o Options) withDefaults() Options {
	if o.Size == 0 {
		o.Size = 224
	}
	if o.ScaleMin == 0 && o.ScaleMax == 0 {
		o.ScaleMin, o.ScaleMax = 0.08, 1
	}
	if o.RatioMin == 0 && o.RatioMax == 0 {
		o.RatioMin, o.RatioMax = 3.0/4, 4.0/3
	}
	if o.FlipP == 0 {
		o.FlipP = 0.5
	}
	if o.MaxRotate == 0 {
		o.MaxRotate = 10
	}
	if o.Mean == ([3]float32{}) {
		o.Mean = [3]float32{0.485, 0.456, 0.406}
	}
	if o.Std == ([3]float32{}) {
		o.Std = [3]float32{0.229, 0.224, 0.225}
	}
	return o
}

func (o Options) check() error {
	switch {
	case o.Size < 1 || o.Size > 4096:
		return fmt.Errorf("prep: output size %d outside [1, 4096]", o.Size)
	case !(0 < o.ScaleMin && o.ScaleMin <= o.ScaleMax && o.ScaleMax <= 1):
		return fmt.Errorf("prep: scale [%v, %v] not inside (0, 1]", o.ScaleMin, o.ScaleMax)
	case !(0 < o.RatioMin && o.RatioMin <= o.RatioMax):
		return fmt.Errorf("prep: ratio [%v, %v] not positive and ordered", o.RatioMin, o.RatioMax)
	}
	for c := range 3 {
		if !(o.Std[c] > 0) {
			return fmt.Errorf("prep: std %v not positive", o.Std)
		}
	}
	return nil
}

// TensorLen is the number of float32 values of one output tensor.
func (o Options) TensorLen() int {
	o = o.withDefaults()
	return 3 * o.Size * o.Size
}

// PixelLen is the number of bytes of one image's 8-bit pixels, what an
// offloaded task returns per image: as many as TensorLen's values.
func (o Options) PixelLen() int { return o.TensorLen() }

// Transform is one image's random draws: the crop (in source pixels),
// the flip, and the rotation about the crop's centre (radians).
type Transform struct {
	X, Y, W, H float64
	Flip       bool
	Angle      float64
}

// Draw draws an image's transform for a w×h source, as torchvision's
// RandomResizedCrop does (ten tries, then a central crop).
func (o Options) Draw(rng *rand.Rand, w, h int) Transform {
	o = o.withDefaults()
	area := float64(w * h)
	var t Transform
	found := false
	for range 10 {
		target := area * (o.ScaleMin + rng.Float64()*(o.ScaleMax-o.ScaleMin))
		logr := math.Log(o.RatioMin) + rng.Float64()*(math.Log(o.RatioMax)-math.Log(o.RatioMin))
		ratio := math.Exp(logr)
		cw, ch := math.Round(math.Sqrt(target*ratio)), math.Round(math.Sqrt(target/ratio))
		if cw >= 1 && ch >= 1 && cw <= float64(w) && ch <= float64(h) {
			t.X = math.Floor(rng.Float64() * (float64(w) - cw + 1))
			t.Y = math.Floor(rng.Float64() * (float64(h) - ch + 1))
			t.W, t.H = cw, ch
			found = true
			break
		}
	}
	if !found {
		ratio := float64(w) / float64(h)
		switch {
		case ratio < o.RatioMin:
			t.W, t.H = float64(w), math.Round(float64(w)/o.RatioMin)
		case ratio > o.RatioMax:
			t.W, t.H = math.Round(float64(h)*o.RatioMax), float64(h)
		default:
			t.W, t.H = float64(w), float64(h)
		}
		t.X, t.Y = math.Floor((float64(w)-t.W)/2), math.Floor((float64(h)-t.H)/2)
	}
	t.Flip = o.FlipP > 0 && rng.Float64() < o.FlipP
	if o.MaxRotate > 0 {
		t.Angle = (rng.Float64()*2 - 1) * o.MaxRotate * math.Pi / 180
	}
	return t
}

// rgb is a decoded image as 8-bit RGB rows, what sampling reads.
type rgb struct {
	w, h int
	pix  []uint8
}

// toRGB converts any decoded image, with fast paths for what JPEG and
// PNG decode to.
func toRGB(img image.Image) rgb {
	b := img.Bounds()
	out := rgb{w: b.Dx(), h: b.Dy(), pix: make([]uint8, 3*b.Dx()*b.Dy())}
	i := 0
	switch m := img.(type) {
	case *image.YCbCr:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				yi, ci := m.YOffset(x, y), m.COffset(x, y)
				out.pix[i], out.pix[i+1], out.pix[i+2] = color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
				i += 3
			}
		}
	case *image.NRGBA:
		out.fromRGBA(m.Pix, m.Stride)
	case *image.RGBA:
		out.fromRGBA(m.Pix, m.Stride)
	default:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				r, g, bb, _ := img.At(x, y).RGBA()
				out.pix[i], out.pix[i+1], out.pix[i+2] = uint8(r>>8), uint8(g>>8), uint8(bb>>8)
				i += 3
			}
		}
	}
	return out
}

// fromRGBA fills o from 4-byte RGBA pixels, rows stride bytes apart
// (image.RGBA's and image.NRGBA's Pix), dropping alpha.
func (o *rgb) fromRGBA(pix []uint8, stride int) {
	i := 0
	for y := range o.h {
		row := pix[y*stride:]
		for x := range o.w {
			copy(o.pix[i:i+3], row[4*x:4*x+3])
			i += 3
		}
	}
}

// ErrDecode means an image did not decode.
var ErrDecode = errors.New("prep: not a JPEG or PNG image")

// maxPixels bounds a source image, so a hostile header cannot make the
// pipeline allocate without limit.
const maxPixels = 64 << 20

// apply writes the image, transformed by t, into dst as 8-bit pixels
// (PixelLen values, channel-major: all R, then G, then B), sampling
// bilinearly and rounding: each output pixel maps back through the flip
// and the rotation into the crop. Rounding to 8 bits here is what
// torchvision's RandomResizedCrop on a PIL image does too, and it makes
// an offloaded image's result a quarter the size of its float tensor.
func (o Options) apply(src rgb, t Transform, dst []uint8) {
	s := o.Size
	plane := s * s
	cx, cy := t.X+t.W/2, t.Y+t.H/2
	sx, sy := t.W/float64(s), t.H/float64(s)
	cos, sin := math.Cos(t.Angle), math.Sin(t.Angle)
	for v := range s {
		for u := range s {
			// Output pixel centre, relative to the centre, in crop pixels.
			du := (float64(u) + 0.5 - float64(s)/2) * sx
			dv := (float64(v) + 0.5 - float64(s)/2) * sy
			if t.Flip {
				du = -du
			}
			x := cx + du*cos - dv*sin - 0.5
			y := cy + du*sin + dv*cos - 0.5
			r, g, b := src.bilinear(x, y)
			k := v*s + u
			dst[k] = uint8(r + 0.5)
			dst[plane+k] = uint8(g + 0.5)
			dst[2*plane+k] = uint8(b + 0.5)
		}
	}
}

// Normalizer turns 8-bit pixels into the normalised float32 tensor: a
// table per channel of (v/255 - mean) / std for each byte value v, so a
// value costs one lookup.
type Normalizer struct {
	plane int
	lut   [3][256]float32
}

// Normalizer returns o's normalizer.
func (o Options) Normalizer() *Normalizer {
	o = o.withDefaults()
	n := &Normalizer{plane: o.Size * o.Size}
	for c := range 3 {
		scale, bias := 1/(255*o.Std[c]), -o.Mean[c]/o.Std[c]
		for v := range 256 {
			n.lut[c][v] = float32(v)*scale + bias
		}
	}
	return n
}

// Normalize writes pix (PixelLen bytes, CHW) normalised into dst (as
// many values).
func (n *Normalizer) Normalize(pix []uint8, dst []float32) error {
	if len(pix) != 3*n.plane || len(dst) != len(pix) {
		return fmt.Errorf("prep: normalising %d pixels into %d values, want %d", len(pix), len(dst), 3*n.plane)
	}
	for c := range 3 {
		lut := &n.lut[c]
		src := pix[c*n.plane : (c+1)*n.plane]
		out := dst[c*n.plane : (c+1)*n.plane]
		out = out[:len(src)] // one bounds check for the loop
		for i, v := range src {
			out[i] = lut[v]
		}
	}
	return nil
}

// bilinear samples at (x, y), clamping to the edge.
func (m rgb) bilinear(x, y float64) (r, g, b float32) {
	x = min(max(x, 0), float64(m.w-1))
	y = min(max(y, 0), float64(m.h-1))
	x0, y0 := int(x), int(y)
	x1, y1 := min(x0+1, m.w-1), min(y0+1, m.h-1)
	fx, fy := float32(x-float64(x0)), float32(y-float64(y0))
	p00, p10 := m.pix[3*(y0*m.w+x0):], m.pix[3*(y0*m.w+x1):]
	p01, p11 := m.pix[3*(y1*m.w+x0):], m.pix[3*(y1*m.w+x1):]
	var out [3]float32
	for c := range 3 {
		top := float32(p00[c]) + (float32(p10[c])-float32(p00[c]))*fx
		bot := float32(p01[c]) + (float32(p11[c])-float32(p01[c]))*fx
		out[c] = top + (bot-top)*fy
	}
	return out[0], out[1], out[2]
}

// Process runs the pipeline on one encoded image, drawing its transform
// from (seed, index), and writes its tensor into dst (TensorLen values).
// It is ProcessPixels then Normalize.
func (o Options) Process(data []byte, seed, index uint64, dst []float32) error {
	o = o.withDefaults()
	if len(dst) != 3*o.Size*o.Size {
		return fmt.Errorf("prep: a tensor of %d values, want %d", len(dst), 3*o.Size*o.Size)
	}
	pix := make([]uint8, len(dst))
	if err := o.ProcessPixels(data, seed, index, pix); err != nil {
		return err
	}
	return o.Normalizer().Normalize(pix, dst)
}

// ProcessPixels runs the pipeline on one encoded image up to
// normalisation, drawing its transform from (seed, index), and writes
// its 8-bit CHW pixels into dst (PixelLen bytes).
func (o Options) ProcessPixels(data []byte, seed, index uint64, dst []uint8) error {
	o = o.withDefaults()
	if err := o.check(); err != nil {
		return err
	}
	if len(dst) != 3*o.Size*o.Size {
		return fmt.Errorf("prep: %d bytes of pixels, want %d", len(dst), 3*o.Size*o.Size)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDecode, err)
	}
	if cfg.Width < 1 || cfg.Height < 1 || cfg.Width*cfg.Height > maxPixels {
		return fmt.Errorf("%w: %d×%d pixels", ErrDecode, cfg.Width, cfg.Height)
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDecode, err)
	}
	src := toRGB(img)
	rng := rand.New(rand.NewPCG(seed, index))
	o.apply(src, o.Draw(rng, src.w, src.h), dst)
	return nil
}

// Encoding of Options (and a run's seed and first index) as a task's
// arguments: little-endian, fixed layout.
const argsLen = 8 + 8 + 8 + 6*8 + 6*4

// EncodeArgs encodes the options, the run's seed and the index of the
// request's first image.
func EncodeArgs(o Options, seed, first uint64) []byte {
	o = o.withDefaults()
	b := make([]byte, 0, argsLen)
	b = binary.LittleEndian.AppendUint64(b, uint64(o.Size))
	b = binary.LittleEndian.AppendUint64(b, seed)
	b = binary.LittleEndian.AppendUint64(b, first)
	for _, f := range []float64{o.ScaleMin, o.ScaleMax, o.RatioMin, o.RatioMax, o.FlipP, o.MaxRotate} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	for _, f := range append(o.Mean[:], o.Std[:]...) {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// DecodeArgs decodes EncodeArgs.
func DecodeArgs(b []byte) (o Options, seed, first uint64, err error) {
	if len(b) != argsLen {
		return o, 0, 0, fmt.Errorf("prep: %d bytes of arguments, want %d", len(b), argsLen)
	}
	size := binary.LittleEndian.Uint64(b)
	if size < 1 || size > 4096 {
		return o, 0, 0, fmt.Errorf("prep: output size %d outside [1, 4096]", size)
	}
	o.Size = int(size)
	seed, first = binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	fs := make([]float64, 6)
	for i := range fs {
		fs[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[24+8*i:]))
	}
	o.ScaleMin, o.ScaleMax, o.RatioMin, o.RatioMax, o.FlipP, o.MaxRotate = fs[0], fs[1], fs[2], fs[3], fs[4], fs[5]
	for c := range 3 {
		o.Mean[c] = math.Float32frombits(binary.LittleEndian.Uint32(b[72+4*c:]))
		o.Std[c] = math.Float32frombits(binary.LittleEndian.Uint32(b[84+4*c:]))
	}
	return o, seed, first, o.check()
}

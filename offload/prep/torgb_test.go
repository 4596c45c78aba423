package prep

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"testing"
)

// opaque hides an image's concrete type, so toRGB takes its generic path.
type opaque struct{ image.Image }

// TestToRGBFastPaths: the NRGBA and RGBA fast paths give what the
// generic path gives, for whole images and for a sub-image whose rows
// start inside a larger Pix.
func TestToRGBFastPaths(t *testing.T) {
	nrgba := image.NewNRGBA(image.Rect(0, 0, 13, 7))
	for y := range 7 {
		for x := range 13 {
			nrgba.Set(x, y, color.NRGBA{uint8(10 * x), uint8(10 * y), uint8(3*x + 7*y), 255})
		}
	}
	rgba := image.NewRGBA(image.Rect(0, 0, 13, 7))
	draw.Draw(rgba, rgba.Bounds(), nrgba, image.Point{}, draw.Src)
	sub := nrgba.SubImage(image.Rect(3, 2, 11, 6))
	for name, img := range map[string]image.Image{"nrgba": nrgba, "rgba": rgba, "sub": sub} {
		got, want := toRGB(img), toRGB(opaque{img})
		if got.w != want.w || got.h != want.h || !bytes.Equal(got.pix, want.pix) {
			t.Errorf("%s: fast path %dx%d differs from the generic one %dx%d", name, got.w, got.h, want.w, want.h)
		}
	}
}

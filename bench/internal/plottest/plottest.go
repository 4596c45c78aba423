// Package plottest checks the charts experiments draw, for their tests.
package plottest

import (
	"image"
	"image/png"
	"os"
	"testing"
)

// DecodePNG reads the PNG file at path, failing the test if it is not one.
func DecodePNG(t testing.TB, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	return img
}

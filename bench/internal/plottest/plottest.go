// Package plottest checks the charts and tables experiments draw, for
// their tests.
package plottest

import (
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Table writes r's table with write and returns it, failing the test if
// writing fails or the table lacks any of wants.
func Table[R any](t testing.TB, write func(io.Writer, R) error, r R, wants ...string) string {
	t.Helper()
	var b strings.Builder
	if err := write(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range wants {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	return b.String()
}

// SavePNG saves r's chart with save to a .png file of its own and returns
// the image, failing the test unless a PNG was written.
func SavePNG[R any](t testing.TB, save func(string, R) error, r R) image.Image {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plot.png")
	if err := save(path, r); err != nil {
		t.Fatal(err)
	}
	return DecodePNG(t, path)
}

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

package prep

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/nearstore/nearstore/offloadfs"
)

// Synthetic makes image i of a synthetic ImageNet-like set: about
// 500×375 (each side drawn within ±25%), landscape or portrait, with
// photographic structure — a lit gradient sky over ground, soft shapes,
// and sensor-like noise, so JPEG sizes are a photograph's, not a flat
// fill's. Nine in ten are JPEG (quality 90), one in ten PNG. It returns
// the encoded bytes and the file extension.
func Synthetic(seed, i uint64) ([]byte, string, error) {
	rng := rand.New(rand.NewPCG(seed, i))
	w := 375 + rng.IntN(251) // 375..625
	h := 281 + rng.IntN(189) // 281..469
	if rng.IntN(5) == 0 {
		w, h = h, w
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	var sky, ground [3]float64
	for c := range 3 {
		sky[c] = 80 + 170*rng.Float64()
		ground[c] = 20 + 140*rng.Float64()
	}
	horizon := float64(h) * (0.3 + 0.4*rng.Float64())
	type blob struct {
		x, y, r, k float64
		col        [3]float64
	}
	blobs := make([]blob, 3+rng.IntN(8))
	for j := range blobs {
		b := &blobs[j]
		b.x, b.y = rng.Float64()*float64(w), rng.Float64()*float64(h)
		b.r = (0.05 + 0.25*rng.Float64()) * float64(min(w, h))
		b.k = 0.5 + rng.Float64()
		for c := range 3 {
			b.col[c] = 255 * rng.Float64()
		}
	}
	fx, fy := 0.01+0.05*rng.Float64(), 0.01+0.05*rng.Float64()
	for y := range h {
		for x := range w {
			var px [3]float64
			t := float64(y) / horizon
			for c := range 3 {
				if float64(y) < horizon {
					px[c] = sky[c] * (0.7 + 0.3*t)
				} else {
					px[c] = ground[c] * (1 + 0.3*math.Sin(float64(x)*fx)*math.Sin(float64(y)*fy))
				}
			}
			for _, b := range blobs {
				d := math.Hypot(float64(x)-b.x, float64(y)-b.y) / b.r
				if d < 1.5 {
					a := math.Exp(-d * d * b.k * 2)
					for c := range 3 {
						px[c] = px[c]*(1-a) + b.col[c]*a
					}
				}
			}
			o := img.PixOffset(x, y)
			n := rng.NormFloat64() * 6
			for c := range 3 {
				img.Pix[o+c] = uint8(min(max(px[c]+n, 0), 255))
			}
			img.Pix[o+3] = 255
		}
	}
	var buf bytes.Buffer
	if rng.IntN(10) == 0 {
		if err := png.Encode(&buf, img); err != nil {
			return nil, "", err
		}
		return buf.Bytes(), ".png", nil
	}
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), ".jpg", nil
}

// Generate writes count synthetic images (Synthetic) into directory dir
// of fsys, creating it, named img-00000.jpg and on, and commits. Images
// are made on GOMAXPROCS workers and written in order. progress, if set,
// is called after each image is written.
func Generate(ctx context.Context, fsys *offloadfs.FS, dir string, count int, seed uint64, progress func(done int)) error {
	if err := fsys.MkdirAll(dir); err != nil {
		return err
	}
	type made struct {
		data []byte
		ext  string
		err  error
	}
	workers := max(1, runtime.GOMAXPROCS(0))
	results := make([]chan made, count)
	for i := range results {
		results[i] = make(chan made, 1)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, 2*workers) // bounds the images made ahead of the writer
	go func() {
		for i := range count {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			go func() {
				data, ext, err := Synthetic(seed, uint64(i))
				results[i] <- made{data, ext, err}
			}()
		}
	}()
	for i := range count {
		var m made
		select {
		case m = <-results[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
		<-sem
		if m.err != nil {
			return m.err
		}
		if err := writeFile(fsys, path.Join(dir, fmt.Sprintf("img-%05d%s", i, m.ext)), m.data); err != nil {
			return err
		}
		if progress != nil {
			progress(i + 1)
		}
	}
	return fsys.Sync(ctx)
}

// Import copies the JPEG and PNG files of local directory src (not its
// subdirectories) into dir of fsys, and commits; it returns how many.
func Import(ctx context.Context, fsys *offloadfs.FS, dir, src string) (int, error) {
	ents, err := os.ReadDir(src)
	if err != nil {
		return 0, err
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if e.IsDir() || !isImage(e.Name()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return n, err
		}
		if err := writeFile(fsys, path.Join(dir, e.Name()), data); err != nil {
			return n, err
		}
		n++
	}
	return n, fsys.Sync(ctx)
}

// List returns the paths of the JPEG and PNG files in dir, sorted.
func List(fsys *offloadfs.FS, dir string) ([]string, error) {
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && isImage(e.Name()) {
			out = append(out, path.Join(dir, e.Name()))
		}
	}
	slices.Sort(out)
	return out, nil
}

func isImage(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".jpg", ".jpeg", ".png":
		return true
	}
	return false
}

func writeFile(fsys *offloadfs.FS, name string, data []byte) error {
	f, err := fsys.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

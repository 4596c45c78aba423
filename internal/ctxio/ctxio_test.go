package ctxio

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

// cancelAtEnd reads r and cancels when it reaches the end.
type cancelAtEnd struct {
	r      io.Reader
	cancel context.CancelFunc
}

func (c cancelAtEnd) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil {
		c.cancel()
	}
	return n, err
}

func TestCopy(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	for _, tc := range []struct {
		name    string
		src     func(cancel context.CancelFunc) io.Reader
		pre     bool // cancel before copying
		wantN   int64
		wantErr error
	}{
		{"whole", func(context.CancelFunc) io.Reader { return bytes.NewReader(data) }, false, int64(len(data)), nil},
		{"empty", func(context.CancelFunc) io.Reader { return bytes.NewReader(nil) }, false, 0, nil},
		{"cancelled first", func(context.CancelFunc) io.Reader { return bytes.NewReader(data) }, true, 0, context.Canceled},
		{"ends as cancelled", func(c context.CancelFunc) io.Reader { return cancelAtEnd{bytes.NewReader(data), c} }, false, int64(len(data)), context.Canceled},
		{"read error", func(context.CancelFunc) io.Reader { return io.MultiReader(bytes.NewReader(data[:10]), errReader{}) }, false, 0, errBoom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.pre {
				cancel()
			}
			var dst bytes.Buffer
			n, err := Copy(ctx, &dst, tc.src(cancel), 3000)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && n != tc.wantN) || int64(dst.Len()) != n {
				t.Fatalf("Copy: %d, %v (wrote %d); want %d, %v", n, err, dst.Len(), tc.wantN, tc.wantErr)
			}
			if tc.wantErr == nil && !bytes.Equal(dst.Bytes(), data[:n]) {
				t.Fatal("copied bytes differ")
			}
		})
	}
}

var errBoom = errors.New("boom")

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errBoom }

// Package ctxio copies with a context: the copy stops when the context is
// done, and a source that ended while it was being cancelled counts as
// cancelled, not complete.
package ctxio

import (
	"context"
	"io"
)

// Copy copies src to dst in chunk-byte pieces (io.Copy would let an
// *os.File source pick its own 32 KiB buffer) until src ends or ctx is
// done, and returns the bytes copied. When src ends it returns ctx.Err():
// a pipe whose writer was killed by the same Ctrl-C that cancelled ctx
// reads as a clean end, and only the context tells the two apart, so a
// caller that commits on success commits only complete copies.
func Copy(ctx context.Context, dst io.Writer, src io.Reader, chunk int) (int64, error) {
	buf := make([]byte, chunk)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, err := io.ReadFull(src, buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return n, ctx.Err()
		case err != nil:
			return n, err
		}
	}
}

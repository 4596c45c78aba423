package offloadfs

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	iofs "io/fs"
	"os"
	"path"

	"github.com/nearstore/nearstore/internal/ctxio"
)

// PutFile writes the whole of src to name, atomically: the bytes go to a
// new file under a temporary name beside it, which is renamed over name
// only when src has ended and ctx is still live. Until that rename name
// is as it was; after it, it is the new file, complete, and the next
// commit (Sync, or Close) makes it durable. On any failure, the
// cancellation of ctx included, the temporary file is removed and name is
// untouched. It returns the bytes written.
//
// ctx is checked at the rename because a source that ended is not always
// complete (ctxio.Copy).
func (fsys *FS) PutFile(ctx context.Context, name string, src io.Reader) (int64, error) {
	var r [4]byte
	_, _ = crand.Read(r[:])
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".part-"+hex.EncodeToString(r[:]))
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return 0, err
	}
	n, err := ctxio.Copy(ctx, f, src, putChunk)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = fsys.Rename(tmp, name)
	}
	if err != nil {
		if rerr := fsys.Remove(tmp); rerr != nil && !errors.Is(rerr, iofs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return 0, err
	}
	return n, nil
}

// putChunk is PutFile's transfer unit: file I/O goes straight to the
// device, so large writes mean few round trips.
const putChunk = 1 << 20

// RemoveAll removes name and, if it is a directory, everything below it,
// depth first. A name that does not exist is not an error (as
// os.RemoveAll). On an error it stops, and what was removed stays
// removed.
func (fsys *FS) RemoveAll(name string) error {
	fi, err := fsys.Stat(name)
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		des, err := fsys.ReadDir(name)
		if err != nil {
			return err
		}
		for _, de := range des {
			if err := fsys.RemoveAll(path.Join(name, de.Name())); err != nil {
				return err
			}
		}
	}
	return fsys.Remove(name)
}

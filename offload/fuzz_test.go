package offload

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/nearstore/nearstore/offload/offloadpb"
)

// fenceDev is a device of size bytes that fails the test on any access
// outside it: what an engine may never do, whatever a request says.
type fenceDev struct {
	t    *testing.T
	size int64
}

func (d *fenceDev) check(p []byte, off int64) {
	if off < 0 || off+int64(len(p)) > d.size {
		d.t.Fatalf("access [%d, +%d) outside the %d-byte device", off, len(p), d.size)
	}
}
func (d *fenceDev) ReadAt(p []byte, off int64) (int, error)  { d.check(p, off); return len(p), nil }
func (d *fenceDev) WriteAt(p []byte, off int64) (int, error) { d.check(p, off); return len(p), nil }
func (d *fenceDev) Size() int64                              { return d.size }
func (d *fenceDev) BlockSize() int                           { return 512 }
func (d *fenceDev) Flush(context.Context) error              { return nil }

// FuzzRequest decodes a request from arbitrary extents, sizes and modes,
// as the gRPC server would, and runs a task that reads every file whole
// and writes every writable one whole, then past its end: the engine
// either refuses the request, or touches only the device (fenceDev) and
// refuses the writes past the end.
func FuzzRequest(f *testing.F) {
	seed := func(size uint64, lba uint64, blocks uint32, mode uint8) []byte {
		b := binary.LittleEndian.AppendUint64(nil, size)
		b = binary.LittleEndian.AppendUint64(b, lba)
		b = binary.LittleEndian.AppendUint32(b, blocks)
		return append(b, mode)
	}
	f.Add(seed(1000, 0, 2, 1))
	f.Add(seed(1024, 2046, 2, 2))
	f.Add(seed(1025, 2046, 2, 2))
	f.Add(seed(0, 0, 0, 0))
	f.Add(append(seed(5000, 10, 4, 1), seed(512, 1<<40, 1, 2)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		dev := &fenceDev{t: t, size: 1 << 20}
		tasks := NewRegistry()
		_ = tasks.Register("touch", func(ctx context.Context, env *Env, _ []byte) ([]byte, error) {
			for i := range env.NumFiles() {
				buf := make([]byte, env.Size(i))
				if _, err := env.ReadAt(ctx, i, buf, 0); err != nil {
					return nil, err
				}
				if env.Writable(i) {
					if _, err := env.WriteAt(ctx, i, buf, 0); err != nil {
						return nil, err
					}
					if _, err := env.WriteAt(ctx, i, []byte{1}, env.Size(i)); !errors.Is(err, ErrOutsideGrant) {
						t.Fatalf("a write past file %d's end: %v", i, err)
					}
				}
			}
			return nil, nil
		})
		e, err := NewEngine(Config{HostNQN: "fuzz", Device: dev, Tasks: tasks, CacheBytes: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		pb := &offloadpb.RunRequest{Task: "touch"}
		for len(data) >= 21 && len(pb.Files) < 8 {
			size := binary.LittleEndian.Uint64(data) % (1 << 21)
			pf := &offloadpb.File{Inode: uint64(len(pb.Files)), Size: size, Mode: offloadpb.Mode(data[20] % 4)}
			pf.Extents = append(pf.Extents, &offloadpb.Extent{Lba: binary.LittleEndian.Uint64(data[8:]), Blocks: binary.LittleEndian.Uint32(data[16:])})
			pb.Files = append(pb.Files, pf)
			data = data[21:]
		}
		req, err := requestFromPB(pb)
		if err != nil {
			return
		}
		_, _ = e.Run(context.Background(), req)
	})
}

package offload

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// StandardTasks returns a registry with the tasks every nearstore binary
// has:
//
//   - "copy": writes the request's inputs, end to end, into its first
//     output; returns the bytes copied (8 bytes, little-endian).
//   - "crc32c": returns the CRC32C of each input, 4 bytes little-endian
//     each, in order.
func StandardTasks() *Registry {
	r := NewRegistry()
	_ = r.Register("copy", copyTask)
	_ = r.Register("crc32c", crcTask)
	return r
}

// chunk is how much the standard tasks move per call.
const chunk = 1 << 20

func copyTask(ctx context.Context, env *Env, _ []byte) ([]byte, error) {
	out := -1
	for i := range env.NumFiles() {
		if env.Writable(i) {
			out = i
			break
		}
	}
	if out < 0 {
		return nil, fmt.Errorf("copy: no output file")
	}
	buf := make([]byte, chunk)
	var at int64
	for i := range env.NumFiles() {
		if env.Writable(i) {
			continue
		}
		for off, size := int64(0), env.Size(i); off < size; {
			n := min(int64(len(buf)), size-off)
			if _, err := env.ReadAt(ctx, i, buf[:n], off); err != nil {
				return nil, err
			}
			if _, err := env.WriteAt(ctx, out, buf[:n], at); err != nil {
				return nil, err
			}
			off += n
			at += n
		}
	}
	return binary.LittleEndian.AppendUint64(nil, uint64(at)), nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crcTask(ctx context.Context, env *Env, _ []byte) ([]byte, error) {
	buf := make([]byte, chunk)
	var out []byte
	for i := range env.NumFiles() {
		if env.Writable(i) {
			continue
		}
		var sum uint32
		for off, size := int64(0), env.Size(i); off < size; {
			n := min(int64(len(buf)), size-off)
			if _, err := env.ReadAt(ctx, i, buf[:n], off); err != nil {
				return nil, err
			}
			sum = crc32.Update(sum, castagnoli, buf[:n])
			off += n
		}
		out = binary.LittleEndian.AppendUint32(out, sum)
	}
	return out, nil
}

package volume

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
)

// Volume is a block device: fixed size, byte-addressed, safe for concurrent
// use.
//
// ReadAt and WriteAt either transfer all of p or fail; a request that does not
// fit in [0, Size) fails with an error wrapping ErrOutOfRange and transfers
// nothing (unlike a file, a block device has no short read at its end).
type Volume interface {
	io.ReaderAt
	io.WriterAt
	// Size is the capacity in bytes, a multiple of BlockSize.
	Size() int64
	// BlockSize is the logical block size in bytes that the target should
	// advertise (512 by default, 4096 when asked for).
	BlockSize() int
	// Flush makes completed writes durable: fdatasync for files and
	// devices, a no-op for mem and sim volumes.
	Flush() error
	// WriteZeroes makes [off, off+n) read as zeroes. Backends may keep the
	// space allocated.
	WriteZeroes(off, n int64) error
	// Deallocate discards [off, off+n): files and devices punch a hole,
	// mem volumes free or zero the memory. Reads afterwards return zeroes.
	Deallocate(off, n int64) error
	// Close releases the volume; later operations fail with ErrClosed.
	Close() error
	// String returns the spec the volume was opened from.
	String() string
}

// Errors returned by volumes and Open. Test for them with errors.Is; the
// errors actually returned wrap them with details.
var (
	// ErrOutOfRange means an access fell outside [0, Size). The NVMe target
	// maps it to the LBA Out of Range status.
	ErrOutOfRange = errors.New("volume: access out of range")
	// ErrBadSpec means Open could not parse its spec or its options.
	ErrBadSpec = errors.New("volume: bad spec")
	// ErrClosed means the volume has been closed.
	ErrClosed = errors.New("volume: closed")
)

// Block size limits. NVMe's smallest LBA format is 512 bytes; 64 KiB is far
// beyond anything a host will use and keeps bounce buffers reasonable.
const (
	defaultBlockSize = 512
	minBlockSize     = 512
	maxBlockSize     = 64 << 10
)

// Option adjusts how Open opens a volume.
type Option func(*openOptions)

// openOptions collects the Options given to Open.
type openOptions struct {
	sim *SimParams
}

// WithSimParams replaces the default model parameters of a sim volume (all of
// them: a zero IOPS or Bandwidth means unlimited). Query parameters in the
// spec still override individual fields. Other backends ignore it.
func WithSimParams(p SimParams) Option {
	return func(o *openOptions) { o.sim = &p }
}

// Open parses spec and opens the volume it describes. See the package
// documentation for the spec syntax.
func Open(spec string, opts ...Option) (Volume, error) {
	var o openOptions
	for _, opt := range opts {
		opt(&o)
	}
	s, err := parseSpec(spec)
	if err != nil {
		return nil, err
	}
	switch s.kind {
	case "mem":
		return openMem(s)
	case "sim":
		return openSim(s, &o)
	case "file":
		return openFile(s)
	case "dev":
		return openDev(s)
	}
	return nil, s.errorf("unknown kind %q (want mem, file, dev or sim)", s.kind)
}

// spec is a parsed spec string: "kind:body?k=v&k=v".
type spec struct {
	raw    string
	kind   string
	body   string
	params map[string]string
}

// parseSpec splits a spec into kind, body and query parameters. It checks
// only the syntax common to all kinds; the backends check the rest.
func parseSpec(raw string) (*spec, error) {
	s := &spec{raw: raw, params: map[string]string{}}
	kind, rest, ok := strings.Cut(raw, ":")
	if !ok {
		return nil, s.errorf("missing ':' (want kind:..., e.g. mem:1GiB)")
	}
	s.kind = kind
	body, query, hasQuery := strings.Cut(rest, "?")
	s.body = body
	if hasQuery {
		if query == "" {
			return nil, s.errorf("empty query after '?'")
		}
		for _, kv := range strings.Split(query, "&") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, s.errorf("query parameter %q is not key=value", kv)
			}
			if _, dup := s.params[k]; dup {
				return nil, s.errorf("query parameter %q given twice", k)
			}
			s.params[k] = v
		}
	}
	return s, nil
}

// errorf returns an error wrapping ErrBadSpec that names the spec.
func (s *spec) errorf(format string, args ...any) error {
	return fmt.Errorf("%w %q: %s", ErrBadSpec, s.raw, fmt.Sprintf(format, args...))
}

// allow rejects query parameters other than the given ones, so a typo such
// as "szie=1G" is an error instead of being silently ignored.
func (s *spec) allow(keys ...string) error {
	for k := range s.params {
		known := false
		for _, a := range keys {
			if k == a {
				known = true
				break
			}
		}
		if !known {
			return s.errorf("unknown query parameter %q for %s (allowed: %s)", k, s.kind, strings.Join(keys, ", "))
		}
	}
	return nil
}

// size parses a size that must be positive, naming what it is on error.
func (s *spec) size(what, v string) (int64, error) {
	n, err := parseSize(v)
	if err != nil {
		return 0, s.errorf("%s: %v", what, err)
	}
	if n <= 0 {
		return 0, s.errorf("%s must be positive", what)
	}
	return n, nil
}

// blockSize returns the bs parameter, or def if absent.
func (s *spec) blockSize(def int) (int, error) {
	v, ok := s.params["bs"]
	if !ok {
		return def, nil
	}
	n, err := parseSize(v)
	if err != nil {
		return 0, s.errorf("bs: %v", err)
	}
	if n < minBlockSize || n > maxBlockSize || n&(n-1) != 0 {
		return 0, s.errorf("bs %d is not a power of two from %d to %d", n, minBlockSize, maxBlockSize)
	}
	return int(n), nil
}

// boolParam returns a boolean parameter ("1", "true", "0", "false", ...), or
// def if absent.
func (s *spec) boolParam(key string, def bool) (bool, error) {
	v, ok := s.params[key]
	if !ok {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, s.errorf("%s=%q is not a boolean (want 0 or 1)", key, v)
	}
	return b, nil
}

// checkIO is the check every volume makes before an I/O on [off, off+n):
// a closed volume fails with ErrClosed, then the range must lie within
// [0, size).
func checkIO(closed *atomic.Bool, off, n, size int64) error {
	if closed.Load() {
		return ErrClosed
	}
	return checkRange(off, n, size)
}

// checkRange reports whether [off, off+n) lies within [0, size), without
// overflowing for huge off or n.
func checkRange(off, n, size int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("%w: offset %d length %d, volume size %d", ErrOutOfRange, off, n, size)
	}
	return nil
}

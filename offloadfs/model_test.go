package offloadfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
)

// The model: what the file system should contain, as paths to files and
// directories. Files carry an identity, so tests can follow them across
// renames.

type mfile struct {
	id   int
	data []byte
}

type model struct {
	files  map[string]*mfile
	dirs   map[string]bool // "" is the root
	nextID int
}

func newModel() *model {
	return &model{files: map[string]*mfile{}, dirs: map[string]bool{"": true}}
}

func (m *model) clone() *model {
	c := &model{files: make(map[string]*mfile, len(m.files)), dirs: make(map[string]bool, len(m.dirs)), nextID: m.nextID}
	// File contents are never changed in place (apply replaces them), so
	// clones share them.
	for p, f := range m.files {
		c.files[p] = &mfile{id: f.id, data: f.data}
	}
	for p := range m.dirs {
		c.dirs[p] = true
	}
	return c
}

// Error classes, compared between the model and the file system.
const (
	eNone     = "ok"
	eNotExist = "not-exist"
	eExist    = "exist"
	eNotDir   = "not-dir"
	eIsDir    = "is-dir"
	eNotEmpty = "not-empty"
	eInvalid  = "invalid"
)

func classify(err error) string {
	switch {
	case err == nil:
		return eNone
	// The file system's own errors first: ENOTEMPTY also counts as
	// fs.ErrExist.
	case errors.Is(err, offloadfs.ErrNotDir):
		return eNotDir
	case errors.Is(err, offloadfs.ErrIsDir):
		return eIsDir
	case errors.Is(err, offloadfs.ErrNotEmpty):
		return eNotEmpty
	case errors.Is(err, iofs.ErrNotExist):
		return eNotExist
	case errors.Is(err, iofs.ErrExist):
		return eExist
	case errors.Is(err, iofs.ErrInvalid):
		return eInvalid
	}
	return "other: " + err.Error()
}

type kind int

const (
	kMissing kind = iota
	kFile
	kDir
)

func (m *model) kind(p string) kind {
	switch {
	case m.dirs[p]:
		return kDir
	case m.files[p] != nil:
		return kFile
	}
	return kMissing
}

// walk resolves p as the file system does, component by component.
func (m *model) walk(p string) (kind, string) {
	if p == "" {
		return kDir, eNone
	}
	k := kDir
	comps := strings.Split(p, "/")
	for i := range comps {
		if k != kDir {
			return 0, eNotDir
		}
		if k = m.kind(strings.Join(comps[:i+1], "/")); k == kMissing {
			return 0, eNotExist
		}
	}
	return k, eNone
}

// parent checks that p's parent directory exists.
func (m *model) parent(p string) string {
	k, e := m.walk(path.Dir("/" + p)[1:])
	if e != eNone {
		return e
	}
	if k != kDir {
		return eNotDir
	}
	return eNone
}

// openExisting is what opening an existing file for writing gives.
func (m *model) openExisting(p string) (*mfile, string) {
	if e := m.parent(p); e != eNone {
		return nil, e
	}
	switch m.kind(p) {
	case kMissing:
		return nil, eNotExist
	case kDir:
		return nil, eIsDir
	}
	return m.files[p], eNone
}

// Operations.

type opKind int

const (
	opMkdir opKind = iota
	opCreate
	opWriteAt
	opAppend
	opTruncate
	opPrealloc
	opRemove
	opRename
	opSync
	opRemount
	numOps
)

var opNames = [...]string{"mkdir", "create", "writeat", "append", "truncate", "prealloc", "remove", "rename", "sync", "remount"}

type op struct {
	kind  opKind
	p, q  string
	off   int64
	n     int64 // truncate size, prealloc length
	data  []byte
	write wrange // filled in by apply: the bytes written in place, if any
}

func (o op) String() string {
	return fmt.Sprintf("%s(%q %q off=%d n=%d len=%d)", opNames[o.kind], o.p, o.q, o.off, o.n, len(o.data))
}

// wrange records bytes [from, to) of file id written by an operation.
type wrange struct {
	id       int
	from, to int64
}

// genPath picks a path in a small namespace, so operations collide.
func genPath(r *rand.Rand) string {
	depth := 1 + r.IntN(3)
	comps := make([]string, depth)
	for i := range comps {
		comps[i] = genName(r)
	}
	return strings.Join(comps, "/")
}

func genName(r *rand.Rand) string { return []string{"a", "b", "c", "d", "e"}[r.IntN(5)] }

// pick returns a random element of a map's keys, or "" if it is empty.
func pick[V any](r *rand.Rand, m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return ""
	}
	sort.Strings(keys)
	return keys[r.IntN(len(keys))]
}

// genTarget picks a path: mostly one that exists (a file if file is set),
// sometimes a new name in an existing directory, sometimes anything.
func genTarget(r *rand.Rand, m *model, file bool) string {
	switch x := r.IntN(10); {
	case x < 6 && file && len(m.files) > 0:
		return pick(r, m.files)
	case x < 6 && !file:
		if p := pick(r, m.dirs); p != "" {
			return p
		}
		fallthrough
	case x < 9:
		return strings.TrimPrefix(pick(r, m.dirs)+"/"+genName(r), "/")
	}
	return genPath(r)
}

// genData returns data of a size that sometimes crosses blocks and extents.
func genData(r *rand.Rand) []byte {
	var n int
	switch r.IntN(4) {
	case 0:
		n = r.IntN(100)
	case 1, 2:
		n = r.IntN(10000)
	default:
		n = r.IntN(100000)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func genOp(r *rand.Rand, m *model, remount bool) op {
	for {
		// Weighted so the tree grows: more creations than removals.
		weights := [numOps]int{opMkdir: 2, opCreate: 4, opWriteAt: 3, opAppend: 2, opTruncate: 1,
			opPrealloc: 1, opRemove: 1, opRename: 2, opSync: 1, opRemount: 1}
		x := r.IntN(18)
		var o op
		for k, w := range weights {
			if x < w {
				o.kind = opKind(k)
				break
			}
			x -= w
		}
		switch o.kind {
		case opRemount:
			if !remount || r.IntN(4) != 0 {
				continue
			}
		case opMkdir:
			o.p = genTarget(r, m, false)
		case opCreate:
			o.p = genTarget(r, m, true)
			o.data = genData(r)
		case opAppend:
			o.p = genTarget(r, m, true)
			o.data = genData(r)
		case opWriteAt:
			o.p = genTarget(r, m, true)
			o.data = genData(r)
			o.off = r.Int64N(30000)
		case opTruncate:
			o.p = genTarget(r, m, true)
			o.n = r.Int64N(40000)
		case opPrealloc:
			o.p = genTarget(r, m, true)
			o.off, o.n = r.Int64N(20000), r.Int64N(100000)
		case opRemove:
			o.p = genTarget(r, m, r.IntN(2) == 0)
		case opRename:
			o.p = genTarget(r, m, r.IntN(3) != 0)
			o.q = genTarget(r, m, r.IntN(4) == 0)
			if r.IntN(2) == 0 {
				o.q = strings.TrimPrefix(pick(r, m.dirs)+"/"+genName(r)+genName(r), "/")
			}
		}
		return o
	}
}

// apply applies o to the model and returns the error class the file
// system should give. It records in-place writes in o.write.
func (m *model) apply(o *op) string {
	switch o.kind {
	case opMkdir:
		if e := m.parent(o.p); e != eNone {
			return e
		}
		if m.kind(o.p) != kMissing {
			return eExist
		}
		m.dirs[o.p] = true
	case opCreate:
		if e := m.parent(o.p); e != eNone {
			return e
		}
		switch m.kind(o.p) {
		case kDir:
			return eIsDir
		case kMissing:
			m.nextID++
			m.files[o.p] = &mfile{id: m.nextID}
		}
		f := m.files[o.p]
		f.data = append([]byte(nil), o.data...)
		o.write = wrange{f.id, 0, int64(len(o.data))}
	case opWriteAt, opAppend:
		f, e := m.openExisting(o.p)
		if e != eNone {
			return e
		}
		if o.kind == opAppend {
			o.off = int64(len(f.data))
		}
		if len(o.data) == 0 {
			return eNone
		}
		end := o.off + int64(len(o.data))
		from := min(o.off, int64(len(f.data)))
		nd := make([]byte, max(end, int64(len(f.data))))
		copy(nd, f.data)
		copy(nd[o.off:], o.data)
		f.data = nd
		o.write = wrange{f.id, from, end}
	case opTruncate:
		f, e := m.openExisting(o.p)
		if e != eNone {
			return e
		}
		old := int64(len(f.data))
		nd := make([]byte, o.n)
		copy(nd, f.data)
		f.data = nd
		if o.n > old {
			o.write = wrange{f.id, old, o.n}
		}
	case opPrealloc:
		_, e := m.openExisting(o.p)
		return e
	case opRemove:
		if e := m.parent(o.p); e != eNone {
			return e
		}
		switch m.kind(o.p) {
		case kMissing:
			return eNotExist
		case kDir:
			for d := range m.dirs {
				if strings.HasPrefix(d, o.p+"/") {
					return eNotEmpty
				}
			}
			for f := range m.files {
				if strings.HasPrefix(f, o.p+"/") {
					return eNotEmpty
				}
			}
			delete(m.dirs, o.p)
		case kFile:
			delete(m.files, o.p)
		}
	case opRename:
		return m.rename(o.p, o.q)
	}
	return eNone
}

func (m *model) rename(p, q string) string {
	if e := m.parent(p); e != eNone {
		return e
	}
	src := m.kind(p)
	if src == kMissing {
		return eNotExist
	}
	if e := m.parent(q); e != eNone {
		return e
	}
	if src == kDir && (q == p || strings.HasPrefix(q, p+"/")) {
		if q == p {
			return eNone
		}
		return eInvalid
	}
	if q == p {
		return eNone
	}
	switch dst := m.kind(q); {
	case dst == kMissing:
	case src == kDir && dst != kDir:
		return eNotDir
	case src == kDir:
		for d := range m.dirs {
			if strings.HasPrefix(d, q+"/") {
				return eNotEmpty
			}
		}
		for f := range m.files {
			if strings.HasPrefix(f, q+"/") {
				return eNotEmpty
			}
		}
		delete(m.dirs, q)
	case dst == kDir:
		return eIsDir
	default:
		delete(m.files, q)
	}
	if src == kFile {
		m.files[q] = m.files[p]
		delete(m.files, p)
		return eNone
	}
	moved := map[string]string{}
	for d := range m.dirs {
		if d == p || strings.HasPrefix(d, p+"/") {
			moved[d] = q + d[len(p):]
		}
	}
	for from, to := range moved {
		delete(m.dirs, from)
		m.dirs[to] = true
	}
	files := map[string]*mfile{}
	for f, mf := range m.files {
		if strings.HasPrefix(f, p+"/") {
			files[q+f[len(p):]] = mf
			delete(m.files, f)
		}
	}
	for f, mf := range files {
		m.files[f] = mf
	}
	return eNone
}

// applyFS applies o to the file system. Remount is the caller's business.
func applyFS(fsys *offloadfs.FS, o op) error {
	switch o.kind {
	case opMkdir:
		return fsys.Mkdir(o.p)
	case opCreate:
		f, err := fsys.Create(o.p)
		if err != nil {
			return err
		}
		_, err = f.Write(o.data)
		return errors.Join(err, f.Close())
	case opWriteAt, opAppend, opTruncate, opPrealloc:
		flag := os.O_RDWR
		if o.kind == opAppend {
			flag = os.O_WRONLY | os.O_APPEND
		}
		f, err := fsys.OpenFile(o.p, flag)
		if err != nil {
			return err
		}
		switch o.kind {
		case opWriteAt:
			_, err = f.WriteAt(o.data, o.off)
		case opAppend:
			_, err = f.Write(o.data)
		case opTruncate:
			err = f.Truncate(o.n)
		case opPrealloc:
			err = f.Preallocate(o.off, o.n)
		}
		return errors.Join(err, f.Close())
	case opRemove:
		return fsys.Remove(o.p)
	case opRename:
		return fsys.Rename(o.p, o.q)
	case opSync:
		return fsys.Sync(context.Background())
	}
	return nil
}

// readTree reads the whole file system into a model (ids left zero).
func readTree(fsys *offloadfs.FS) (*model, error) {
	m := newModel()
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := fsys.ReadDir("/" + dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := path.Join(dir, e.Name())
			if e.IsDir() {
				m.dirs[p] = true
				if err := walk(p); err != nil {
					return err
				}
				continue
			}
			f, err := fsys.Open(p)
			if err != nil {
				return err
			}
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			b := make([]byte, fi.Size())
			if _, err := f.ReadAt(b, 0); err != nil && len(b) > 0 {
				return fmt.Errorf("read %s: %w", p, err)
			}
			if err := f.Close(); err != nil {
				return err
			}
			m.files[p] = &mfile{data: b}
		}
		return nil
	}
	return m, walk("")
}

// diffTree describes how got differs from want; exact lists the file ids
// whose contents must match byte for byte (nil: all of them).
func diffTree(got, want *model, exact func(id int) bool) string {
	var out []string
	for d := range want.dirs {
		if !got.dirs[d] {
			out = append(out, "missing dir "+d)
		}
	}
	for d := range got.dirs {
		if !want.dirs[d] {
			out = append(out, "extra dir "+d)
		}
	}
	for p, f := range want.files {
		g := got.files[p]
		switch {
		case g == nil:
			out = append(out, "missing file "+p)
		case len(g.data) != len(f.data):
			out = append(out, fmt.Sprintf("file %s has %d bytes, want %d", p, len(g.data), len(f.data)))
		case (exact == nil || exact(f.id)) && !bytes.Equal(g.data, f.data):
			out = append(out, fmt.Sprintf("file %s differs at byte %d", p, firstDiff(g.data, f.data)))
		}
	}
	for p := range got.files {
		if want.files[p] == nil {
			out = append(out, "extra file "+p)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func checkFsck(t *testing.T, fsys *offloadfs.FS, when string) {
	t.Helper()
	rep, err := fsys.Fsck(context.Background())
	if err != nil {
		t.Fatalf("%s: fsck: %v", when, err)
	}
	if err := rep.Err(); err != nil {
		t.Fatalf("%s: %v", when, err)
	}
}

// TestModel applies random operations to the file system and to the
// model, comparing the whole tree after every step and after remounts.
func TestModel(t *testing.T) {
	steps := 1000
	if testing.Short() || raceEnabled {
		steps = 200
	}
	for _, tc := range []struct {
		name string
		spec string
		mkfs offloadfs.MkfsOptions
		seed uint64
	}{
		{"4k", "mem:32MiB", offloadfs.MkfsOptions{}, 1},
		{"4k-seed2", "mem:32MiB", offloadfs.MkfsOptions{}, 2},
		{"512", "mem:16MiB", offloadfs.MkfsOptions{BlockSize: 512}, 3},
		{"dev4k-bs16k", "mem:32MiB?bs=4096", offloadfs.MkfsOptions{BlockSize: 16384}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dev := testfs.Device(t, tc.spec)
			if err := offloadfs.Mkfs(ctx, dev, tc.mkfs); err != nil {
				t.Fatal(err)
			}
			fsys, err := offloadfs.Mount(ctx, dev, testfs.Quiet())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { fsys.Close() }()
			r := rand.New(rand.NewPCG(tc.seed, 0))
			m := newModel()
			for i := range steps {
				o := genOp(r, m, true)
				if o.kind == opRemount {
					if err := fsys.Close(); err != nil {
						t.Fatalf("step %d: close: %v", i, err)
					}
					if fsys, err = offloadfs.Mount(ctx, dev, testfs.Quiet()); err != nil {
						t.Fatalf("step %d: mount: %v", i, err)
					}
				} else {
					want := m.apply(&o)
					if got := classify(applyFS(fsys, o)); got != want {
						t.Fatalf("step %d: %v: got %s, want %s", i, o, got, want)
					}
				}
				got, err := readTree(fsys)
				if err != nil {
					t.Fatalf("step %d: %v: reading the tree: %v", i, o, err)
				}
				if d := diffTree(got, m, nil); d != "" {
					t.Fatalf("step %d: %v: tree differs: %s", i, o, d)
				}
				if i%25 == 0 || o.kind == opRemount {
					checkFsck(t, fsys, fmt.Sprintf("step %d", i))
				}
			}
			// A read-only mount of the committed state sees the same tree.
			if err := fsys.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			ro, err := offloadfs.MountReadOnly(ctx, dev, testfs.Quiet())
			if err != nil {
				t.Fatal(err)
			}
			got, err := readTree(ro)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffTree(got, m, nil); d != "" {
				t.Fatalf("read-only mount: %s", d)
			}
			checkFsck(t, ro, "read-only mount")
			ro.Close()
		})
	}
}

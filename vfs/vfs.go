// Package vfs is the small file-system interface nearstore's stores are
// written against, so the same store runs on the local file system or on
// offloadfs (whose FS.VFS method adapts it). It follows Pebble's vfs.FS:
// just what a log-structured store needs — files written by appending or
// at offsets, read at offsets, synced, renamed into place and removed.
//
// Names are slash-separated. Errors are those of the os package, or wrap
// the same io/fs sentinels (fs.ErrNotExist, fs.ErrExist, ...), so callers
// test them with errors.Is whichever implementation they run on.
package vfs

import (
	"io"
	"io/fs"
)

// FS is a file system.
type FS interface {
	// Create creates or truncates the named file and opens it read-write.
	Create(name string) (File, error)
	// Open opens the named file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens the named file read-write, creating it if it
	// does not exist (without truncating it if it does).
	OpenReadWrite(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// Rename moves oldname to newname, atomically replacing newname if
	// it is a file.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and any missing parents.
	MkdirAll(dir string) error
	// List returns the names in a directory, sorted.
	List(dir string) ([]string, error)
	// Stat describes the named file or directory.
	Stat(name string) (fs.FileInfo, error)
	// SyncDir makes the creations, removals and renames in dir durable.
	SyncDir(dir string) error
	// PathJoin joins path elements with the file system's separator.
	PathJoin(elem ...string) string
}

// File is an open file. ReadAt and WriteAt may be used concurrently; Read
// and Write share a cursor.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Closer
	// Stat describes the file.
	Stat() (fs.FileInfo, error)
	// Sync makes the file's data and size durable.
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Preallocate reserves space for bytes [off, off+length) without
	// changing the size. It is advisory: implementations that cannot
	// reserve space return nil.
	Preallocate(off, length int64) error
}

// Names returns the names of a directory listing, in its order, or err:
// FS.List on top of an os.ReadDir-style call, as in
// vfs.Names(os.ReadDir(dir)).
func Names(ents []fs.DirEntry, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

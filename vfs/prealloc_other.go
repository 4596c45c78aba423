//go:build !linux

package vfs

import "os"

// preallocate is advisory, and a no-op where fallocate is unavailable.
func preallocate(*os.File, int64, int64) error { return nil }

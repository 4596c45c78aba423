package offloadfs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nearstore/nearstore/internal/testfs"
	"github.com/nearstore/nearstore/offloadfs"
)

// TestManyCloses closes thousands of files in a row, each trimming its
// reserve: the transaction must be committed along the way rather than
// outgrow the journal.
func TestManyCloses(t *testing.T) {
	ctx := context.Background()
	fsys := testfs.FreshWith(t, testfs.Device(t, "mem:1GiB"), offloadfs.MkfsOptions{Inodes: 8192})
	var files []*offloadfs.File
	for i := range 6000 {
		f, err := fsys.Create(fmt.Sprintf("f%d", i))
		if err != nil {
			t.Fatal(err)
		}
		f.Write(make([]byte, 100))
		f.Write(make([]byte, 5000)) // takes a reserve
		files = append(files, f)
	}
	for _, f := range files {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := fsys.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	checkFsck(t, fsys, "after closing")
}

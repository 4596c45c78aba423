package rubble

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/nearstore/nearstore/kv/lsm"
)

// TestCapturedTablesAreTheFiles: a store running as a primary ships the
// bytes its flushes and compactions wrote, captured as they were
// written; each is the table file's bytes, and captures end with the
// edit that takes them.
func TestCapturedTablesAreTheFiles(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fsys, _ := newFS(t)
	if _, err := MakePool(ctx, fsys, 4, 256<<10); err != nil {
		t.Fatal(err)
	}
	sec, err := OpenSecondary(ctx, SecondaryConfig{FS: fsys, Dir: "db", Options: lsm.Options{Logger: quiet, MemTableSize: 16 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	var tables, captured int
	sec.SetReplica(false, func(e *lsm.VersionEdit) error {
		files := shippedFiles(e)
		got, _, n, done, err := sec.shippedTables(files)
		if err != nil {
			return err
		}
		defer done()
		for i, nf := range files {
			want, err := readTable(sec.FS(), "db", nf.Meta)
			if err != nil {
				return err
			}
			if !bytes.Equal(got[i], want) {
				return fmt.Errorf("table %d: shipped %d bytes, not the file's %d", nf.Meta.FileNum, len(got[i]), len(want))
			}
		}
		tables += len(files)
		captured += n
		return nil
	})
	db := sec.DB()
	for round := range 4 {
		for i := range 500 {
			set(t, db, fmt.Sprintf("k%05d", i*7%500), fmt.Sprintf("v%d-%d", round, i))
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Compact(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if tables == 0 || captured != tables {
		t.Fatalf("%d of %d shipped tables captured", captured, tables)
	}
	sec.captures.mu.Lock()
	left := len(sec.captures.byPath)
	sec.captures.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d captures left after their edits", left)
	}
}

// TestCaptureSpoiled: a table file written other than by Writes in
// order, or past the slot, or not the edit's size, is read back, not
// shipped from its capture; captures are bounded.
func TestCaptureSpoiled(t *testing.T) {
	c := &captures{slot: 8}
	c.enable(true)
	if c.start("000001.log") != nil {
		t.Fatal("a WAL was captured")
	}
	write := func(name string, p ...string) *capture {
		cp := c.start(name)
		for _, s := range p {
			c.write(cp, []byte(s))
		}
		return cp
	}
	write("a.sst", "abc", "de")
	if b := c.take("a.sst", 5); string(b) != "abcde" {
		t.Fatalf("take: %q", b)
	}
	write("b.sst", "abc")
	if b := c.take("b.sst", 4); b != nil {
		t.Fatalf("a capture of another size was taken: %q", b)
	}
	c.spoil(write("c.sst", "abc"))
	if b := c.take("c.sst", 3); b != nil {
		t.Fatalf("a spoiled capture was taken: %q", b)
	}
	write("d.sst", "abcde", "fghij")
	if b := c.take("d.sst", 10); b != nil {
		t.Fatalf("a capture past the slot was taken: %q", b)
	}
	write("e.sst", "abc")
	c.drop("e.sst")
	if b := c.take("e.sst", 3); b != nil {
		t.Fatalf("a dropped capture was taken: %q", b)
	}
	for i := range maxCaptures {
		if c.start(fmt.Sprintf("%d.sst", i)) == nil {
			t.Fatalf("capture %d refused", i)
		}
	}
	if c.start("over.sst") != nil {
		t.Fatal("more than maxCaptures captures")
	}
	c.enable(false)
	if b := c.take("0.sst", 0); b != nil || c.start("f.sst") != nil {
		t.Fatal("captures kept while off")
	}
}

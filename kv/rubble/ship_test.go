package rubble

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/volume"
)

// TestWriteExtents writes tables of every alignment into slots of one
// and of several extents on a real volume and reads the blocks back: the
// table in file order, then zeros to the end of its last block, and
// nothing past it.
func TestWriteExtents(t *testing.T) {
	ctx := context.Background()
	v, err := volume.Open("mem:1MiB")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	dev := offloadfs.VolumeDevice(v)
	bs := dev.BlockSize()
	one := Slot{Extents: pushdown.File{Extents: []pushdown.Extent{{LBA: 8, Blocks: 4}}}}
	// Out of order on the device, so file order is what is checked.
	three := Slot{Extents: pushdown.File{Extents: []pushdown.Extent{{LBA: 40, Blocks: 1}, {LBA: 20, Blocks: 2}, {LBA: 60, Blocks: 3}}}}
	for _, tc := range []struct {
		name    string
		slot    Slot
		size    int
		wantErr string
	}{
		{"empty", one, 0, ""},
		{"under a block", one, bs / 3, ""},
		{"one block", one, bs, ""},
		{"blocks and a part", one, 2*bs + 7, ""},
		{"fills the slot", one, 4 * bs, ""},
		{"past the slot", one, 4*bs + 1, "past the slot's extents"},
		{"ends in the first extent", three, bs - 1, ""},
		{"ends on an extent's end", three, 3 * bs, ""},
		{"ends in the last extent", three, 4*bs + 100, ""},
		{"fills three extents", three, 6 * bs, ""},
		{"past three extents", three, 6*bs + 1, "past the slot's extents"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var devBlocks []int64 // the slot's blocks, in file order
			for _, x := range tc.slot.Extents.Extents {
				for i := range int64(x.Blocks) {
					devBlocks = append(devBlocks, int64(x.LBA)+i)
				}
			}
			junk := bytes.Repeat([]byte{0xee}, bs)
			for _, lba := range devBlocks {
				if _, err := dev.WriteAt(junk, lba*int64(bs)); err != nil {
					t.Fatal(err)
				}
			}
			table := make([]byte, tc.size)
			for i := range table {
				table[i] = byte(i*7 + 1)
			}
			err := writeExtents(ctx, deviceWriter{dev}, tc.slot, table)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			written := (tc.size + bs - 1) / bs
			want := make([]byte, written*bs)
			copy(want, table)
			got := make([]byte, bs)
			for i, lba := range devBlocks {
				if _, err := dev.ReadAt(got, lba*int64(bs)); err != nil {
					t.Fatal(err)
				}
				if i >= written {
					if !bytes.Equal(got, junk) {
						t.Fatalf("block %d of the slot (LBA %d), past the table, was written", i, lba)
					}
					continue
				}
				if !bytes.Equal(got, want[i*bs:(i+1)*bs]) {
					t.Fatalf("block %d of the slot (LBA %d) differs from the table's", i, lba)
				}
			}
		})
	}
}

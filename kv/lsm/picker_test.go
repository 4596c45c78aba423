package lsm

import (
	"fmt"
	"math"
	"testing"
)

// TestScoreDefersToFullerLevel: a level over its target is not compacted
// into a level that is fuller still (relative to its target), the lower
// one goes first; L0 gets the same treatment until it has twice its
// compaction threshold in tables, and then compacts whatever is below.
func TestScoreDefersToFullerLevel(t *testing.T) {
	d := &DB{opts: Options{LBaseMaxBytes: 100, LevelMultiplier: 10, L0CompactionThreshold: 4, L0SlowdownWritesThreshold: 12}}
	d.opts.setDefaults()
	// L6 holds 10000 bytes: the base is L4 (target 100), L5's target is
	// 1000.
	version := func(l0Files int, l4, l5 uint64) *Version {
		e := &VersionEdit{}
		num := uint64(1)
		add := func(level int, size uint64, lo, hi string) {
			f := fm(num, lo, hi)
			f.Size = size
			e.NewFiles = append(e.NewFiles, NewFile{Level: level, Meta: f})
			num++
		}
		for i := 0; i < l0Files; i++ {
			add(0, 10, "a", "z")
		}
		if l4 > 0 {
			add(4, l4, "a", "z")
		}
		if l5 > 0 {
			add(5, l5, "a", "z")
		}
		add(6, 10000, "a", "z")
		v, err := (&Version{}).Apply(e)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		l0Files        int
		l4, l5         uint64
		level          int
		want, wantFill float64
	}{
		{0, 150, 500, 4, 3, 1.5},     // L5 half full: L4 goes down, boosted
		{0, 150, 3000, 4, 0.5, 1.5},  // L5 fuller: L4 waits
		{0, 150, 3000, 5, 3, 3},      // ... and L5 goes first
		{0, 50, 3000, 4, 0.5, 0.5},   // under target: not due, whatever below
		{4, 150, 500, 0, 1 / 1.5, 1}, // L0 due but Lbase fuller: waits
		{6, 150, 500, 0, 1, 1.5},     // 1.5 / 1.5
		{8, 150, 500, 0, 2, 2},       // twice the threshold: plain fill
		{4, 50, 500, 0, 2, 1},        // Lbase half full: L0 boosted
	} {
		t.Run(fmt.Sprintf("L0=%d,L4=%d,L5=%d,L%d", tc.l0Files, tc.l4, tc.l5, tc.level), func(t *testing.T) {
			v := version(tc.l0Files, tc.l4, tc.l5)
			if base, _ := d.levelTargets(v); base != 4 {
				t.Fatalf("base L%d, want L4", base)
			}
			if got := d.fillLocked(v, tc.level); math.Abs(got-tc.wantFill) > 1e-9 {
				t.Fatalf("fill %v, want %v", got, tc.wantFill)
			}
			if got := d.scoreLocked(v, tc.level); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("score %v, want %v", got, tc.want)
			}
		})
	}
}

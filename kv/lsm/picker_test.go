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
	d := &DB{opts: Options{LBaseMaxBytes: 200, LevelMultiplier: 10, L0CompactionThreshold: 4, L0SlowdownWritesThreshold: 12}}
	d.opts.setDefaults()
	// L6 holds 10000 bytes: the base is L4 (target 200).
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
		add(4, l4, "a", "z")
		add(5, l5, "a", "z")
		add(6, 10000, "a", "z")
		v, err := (&Version{}).Apply(e)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const (
		waits   = iota // fill >= 1, but the next level is fuller
		boosted        // due, score above its fill (the next level is under target)
		due            // due, score its plain fill
		notDue         // fill < 1
	)
	for _, tc := range []struct {
		l0Files int
		l4, l5  uint64
		level   int
		want    int
	}{
		{0, 300, 500, 4, boosted},  // L5 under target: L4 goes down
		{0, 300, 6000, 4, waits},   // L5 fuller: L4 waits
		{0, 300, 6000, 5, boosted}, // ... and L5 goes first (L6's target is 90% of the tree)
		{0, 100, 6000, 4, notDue},
		{4, 300, 500, 0, waits}, // L0 due but Lbase fuller
		{8, 300, 500, 0, due},   // twice the threshold: plain fill
		{4, 100, 500, 0, boosted},
	} {
		t.Run(fmt.Sprintf("L0=%d,L4=%d,L5=%d,L%d", tc.l0Files, tc.l4, tc.l5, tc.level), func(t *testing.T) {
			v := version(tc.l0Files, tc.l4, tc.l5)
			base, targets := d.levelTargets(v)
			if base != 4 || targets[4] != 200 || targets[6] <= targets[5] || targets[5] <= targets[4] {
				t.Fatalf("base L%d, targets %v", base, targets)
			}
			fill, score := d.fillLocked(v, tc.level), d.scoreLocked(v, tc.level)
			var got int
			switch {
			case fill < 1:
				got = notDue
			case score < 1:
				got = waits
			case math.Abs(score-fill) < 1e-9:
				got = due
			case score > fill:
				got = boosted
			default:
				t.Fatalf("fill %v, score %v", fill, score)
			}
			if got != tc.want {
				t.Fatalf("fill %v, score %v: class %d, want %d", fill, score, got, tc.want)
			}
		})
	}
}

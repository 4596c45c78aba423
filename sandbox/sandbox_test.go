package sandbox

import (
	"errors"
	"testing"
)

func TestResultLen(t *testing.T) {
	for _, c := range []struct {
		size0 uint64
		want  int
		err   error
	}{
		{size0: 0, want: ScratchSize},
		{size0: 1, want: 1},
		{size0: 464, want: 464},
		{size0: ScratchSize, want: ScratchSize},
		{size0: ScratchSize + 1, err: ErrStep},
		{size0: 1 << 40, err: ErrStep},
	} {
		got, err := ResultLen(c.size0)
		if !errors.Is(err, c.err) || (c.err == nil && got != c.want) {
			t.Errorf("ResultLen(%d) = %d, %v; want %d, %v", c.size0, got, err, c.want, c.err)
		}
	}
}

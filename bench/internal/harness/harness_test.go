package harness

import (
	"testing"
	"time"
)

// TestDefault: zero and negative fields take the default, positive ones
// stay, for each kind of field the Configs have.
func TestDefault(t *testing.T) {
	for _, c := range []struct{ v, want int }{{0, 7}, {-1, 7}, {1, 1}, {9, 9}} {
		v := c.v
		Default(&v, 7)
		if v != c.want {
			t.Errorf("int %d: got %d, want %d", c.v, v, c.want)
		}
	}
	d := -time.Second
	Default(&d, 3*time.Second)
	if d != 3*time.Second {
		t.Errorf("duration -1s: got %v", d)
	}
	f := 0.25
	Default(&f, 0.5)
	if f != 0.25 {
		t.Errorf("float 0.25: got %v", f)
	}
}

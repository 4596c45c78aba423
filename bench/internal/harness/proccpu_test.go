package harness

import "testing"

func TestParseProcStatCPU(t *testing.T) {
	stat := "4242 (name with) spaces) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 130 0 0 20 0 9 0 100 0 0"
	d, err := parseProcStatCPU([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if d != 380*clockTick {
		t.Errorf("CPU %v, want %v", d, 380*clockTick)
	}
	if _, err := parseProcStatCPU([]byte("1 (x) S 1 2")); err == nil {
		t.Error("short stat parsed")
	}
}

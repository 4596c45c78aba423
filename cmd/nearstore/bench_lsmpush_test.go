package main

import (
	"strings"
	"testing"
)

// TestBenchLSMModeFlags checks that bad sweep flags of `bench lsm --mode`
// fail with an error naming the flag or its value, before any target
// starts.
func TestBenchLSMModeFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--runtime", "wasm,jit"}, "--runtime"},
		{[]string{"--concurrency", "8,0"}, "--concurrency"},
		{[]string{"--concurrency", "many"}, "--concurrency"},
		{[]string{"--sample-rates", "2"}, "--sample-rates"},
		{[]string{"--dist", "pareto"}, "key distribution"},
	} {
		args := append([]string{"bench", "lsm", "--mode", "plain,pushdown"}, c.args...)
		_, err := runNearstore(t, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error about %s", c.args, err, c.want)
		}
	}
}

// TestTargetServeCPUProfileBadPath: a profile file that cannot be made
// fails `target serve --cpuprofile` with the flag's name, before it
// serves anything.
func TestTargetServeCPUProfileBadPath(t *testing.T) {
	bad := t.TempDir() + "/missing/target.pprof"
	_, err := runNearstore(t, "target", "serve", "--listen", "127.0.0.1:0", "--volume", "mem:1MiB", "--cpuprofile", bad)
	if err == nil || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Fatalf("got %v, want an error about --cpuprofile", err)
	}
}

package sandbox

import (
	"context"
	"errors"
	"testing"
	"time"
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

// TestYieldContext: a YieldContext carries its Yield like WithYield's,
// hides a Yield its parent carries, passes every other value and the
// parent's end through, and follows a new parent when re-pointed.
func TestYieldContext(t *testing.T) {
	calls := 0
	y := Yield(func(context.Context) (time.Duration, error) { calls++; return 0, nil })
	outer := Yield(func(context.Context) (time.Duration, error) { return 0, errors.New("outer yield called") })
	parent, cancel := context.WithCancel(WithYield(WithTenant(context.Background(), "h1"), outer))
	c := &YieldContext{Context: parent, Yield: y}
	if _, err := YieldOf(c)(c); err != nil || calls != 1 {
		t.Fatalf("YieldOf gave the wrong yield: err %v, calls %d", err, calls)
	}
	if got := TenantOf(c); got != "h1" {
		t.Fatalf("tenant %q, want h1", got)
	}
	cancel()
	select {
	case <-c.Done():
	default:
		t.Fatal("the parent's end did not pass through")
	}
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err %v", c.Err())
	}
	c.Context = WithTenant(context.Background(), "h2")
	if TenantOf(c) != "h2" || c.Err() != nil {
		t.Fatalf("re-pointed: tenant %q, err %v", TenantOf(c), c.Err())
	}
	if YieldOf(&YieldContext{Context: context.Background()}) != nil {
		t.Fatal("a YieldContext without a Yield carries one")
	}
}

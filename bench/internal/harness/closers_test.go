package harness

import (
	"errors"
	"slices"
	"testing"
)

func TestClosersReverseOrderJoinedErrors(t *testing.T) {
	errB := errors.New("b failed")
	var order []string
	c := Closers{
		func() error { order = append(order, "a"); return nil },
		func() error { order = append(order, "b"); return errB },
		func() error { order = append(order, "c"); return nil },
	}
	err := c.Close()
	if want := []string{"c", "b", "a"}; !slices.Equal(order, want) {
		t.Fatalf("closed %v, want %v", order, want)
	}
	if !errors.Is(err, errB) {
		t.Fatalf("Close = %v, want it to wrap %v", err, errB)
	}
	if err := c.Close(); err != nil || len(order) != 3 {
		t.Fatalf("second Close = %v after %v: want nil and nothing closed again", err, order)
	}
}

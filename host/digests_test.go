package host

import (
	"context"
	"testing"
)

// TestDigestsNegotiated: Digests reports what the target granted.
func TestDigestsNegotiated(t *testing.T) {
	addr := startTarget(t)
	for _, want := range []bool{false, true} {
		c, err := Connect(context.Background(), addr, testNQN, Options{HeaderDigest: want, DataDigest: want})
		if err != nil {
			t.Fatal(err)
		}
		h, d := c.Digests()
		c.Close()
		if h != want || d != want {
			t.Errorf("asked for digests %v: negotiated header %v, data %v", want, h, d)
		}
	}
}

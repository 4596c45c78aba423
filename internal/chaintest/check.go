package chaintest

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
)

// CheckOwned reads every acknowledged write back through rt, and
// directly from the group that holds it under the cluster's shard map;
// every other group must refuse the key (codes.OutOfRange).
func CheckOwned(ctx context.Context, t testing.TB, ctl *cluster.Control, rt *chain.Router, acked map[string]string) {
	t.Helper()
	m, err := ctl.ShardMap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range acked {
		got, found, err := rt.Get(ctx, []byte(k))
		if err != nil || !found || string(got) != v {
			t.Fatalf("acknowledged write %q: got %q found=%v err=%v, want %q", k, got, found, err, v)
		}
		for _, g := range m.Groups() {
			c, err := rt.Group(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			got, found, err := c.Get(ctx, []byte(k))
			if g == m.Group([]byte(k)) {
				if err != nil || !found || string(got) != v {
					t.Fatalf("%q at its group %s: got %q found=%v err=%v, want %q", k, g, got, found, err, v)
				}
			} else if status.Code(err) != codes.OutOfRange {
				t.Fatalf("%q (group %s) read at group %s: %v", k, m.Group([]byte(k)), g, err)
			}
		}
	}
}

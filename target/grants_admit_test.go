package target

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nearstore/nearstore/pushdown"
)

// TestAdmitBacksOffAReleasedGrant: a command that read the view while its
// grant was live, and takes its reference only after Release has drained
// the grant and returned, must not run under it: Release's promise is that
// once it completes the owner may reuse the blocks. admit sees the grant
// released, backs off, and retries against the view without it (where the
// host, its last grant gone, is an ordinary host again).
func TestAdmitBacksOffAReleasedGrant(t *testing.T) {
	tbl := grantTable{restricted: new(atomic.Int64)}
	now := time.Unix(1000, 0)
	if _, _, err := tbl.put("owner", &pushdown.Grant{ID: 1, Host: "task", Mode: pushdown.GrantReadWrite, Lease: time.Hour,
		Extents: []pushdown.Extent{{LBA: 100, Blocks: 8}}}, now, 16); err != nil {
		t.Fatal(err)
	}
	inWindow, released := make(chan struct{}), make(chan struct{})
	first := true
	tbl.beforeRef = func() {
		if first { // only the first try waits
			first = false
			close(inWindow)
			<-released
		}
	}
	type result struct {
		refs grantRefs
		ok   bool
	}
	done := make(chan result, 1)
	go func() {
		refs, ok := tbl.admit("task", func() time.Time { return now }, []blockRange{{lba: 100, n: 8, write: true}})
		done <- result{refs, ok}
	}()
	<-inWindow
	g, _ := tbl.release("owner", 1, now)
	if g == nil {
		t.Fatal("no grant to release")
	}
	g.drain() // nothing holds a reference yet: returns at once
	close(released)
	r := <-done
	defer r.refs.release()
	if r.ok && slices.Contains(r.refs, g) {
		t.Fatal("a command was admitted under a grant whose Release had completed")
	}
}

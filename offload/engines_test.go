package offload_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offloadfs"
)

// TestEnginesList: the list has every engine added, in order, with its
// policy, tokens and tasks running (a task held running shows), and an
// engine that does not answer with its error.
func TestEnginesList(t *testing.T) {
	r := newRig(t)
	tasks := testTasks(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	if err := tasks.Register("hold", func(ctx context.Context, _ *offload.Env, _ []byte) ([]byte, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	_, peer := r.engine(onPeer, offload.Config{Tasks: tasks})
	_, tgt := r.engine(inTarget, offload.Config{Tasks: tasks, Admission: offload.Admission{Policy: offload.PolicyTokens, Tokens: 3}})
	dead := "127.0.0.1:1" // nothing listens there

	es := offload.NewEngines(offload.ClientOptions{Name: "lister"})
	defer es.Close()
	for _, a := range []string{peer.Addr(), tgt.Addr(), dead, peer.Addr()} {
		if _, err := es.Add(a); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	r.write("a", 100, 1)
	held := make(chan error, 1)
	go func() {
		_, err := r.fsys.Offload(ctx, peer, "hold", []offloadfs.OffloadFile{{In: r.open("a")}}, nil)
		held <- err
	}()
	<-started
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	list := es.List(lctx)
	cancel()
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("%d engines listed, want 3 (an address added twice counts once): %+v", len(list), list)
	}
	p, g, d := list[0], list[1], list[2]
	if p.Addr != peer.Addr() || p.Err != nil || p.Policy != offload.PolicyNone || p.Running != 1 || !slices.Contains(p.Tasks, "hold") {
		t.Errorf("peer: %+v", p)
	}
	if g.Addr != tgt.Addr() || g.Err != nil || g.Policy != offload.PolicyTokens || g.TokensFree != 3 || g.Running != 0 {
		t.Errorf("target: %+v", g)
	}
	if d.Addr != dead || d.Err == nil || d.Error == "" {
		t.Errorf("dead engine: %+v", d)
	}
	if err := es.Remove(dead); err != nil {
		t.Fatal(err)
	}
	if got := es.List(ctx); len(got) != 2 || got[1].Addr != tgt.Addr() {
		t.Errorf("after Remove: %+v", got)
	}
	if err := es.Remove(dead); err == nil {
		t.Error("removing an engine twice: no error")
	}
}

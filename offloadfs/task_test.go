package offloadfs_test

import (
	"bytes"
	"context"
	"errors"
	iofs "io/fs"
	"os"
	"testing"

	"github.com/nearstore/nearstore/offloadfs"
)

// peerFunc is a Peer in the test's hands: run sees the request while the
// task "runs", and answers for it.
type peerFunc func(ctx context.Context, req offloadfs.TaskRequest) (offloadfs.TaskResult, error)

func (p peerFunc) Grantee(context.Context) (string, error) { return taskNQN, nil }
func (p peerFunc) RunTask(ctx context.Context, req offloadfs.TaskRequest) (offloadfs.TaskResult, error) {
	return p(ctx, req)
}

// TestOffloadContract checks the owner's side of Offload against a peer
// that is the test itself: while the task runs, its output has no name
// and the owner cannot touch the granted bytes (ErrGranted), the request
// describes the files as granted; afterwards the output holds exactly
// what the peer wrote through the granted extents, cut to its size.
func TestOffloadContract(t *testing.T) {
	e := newRemoteEnv(t, nil)
	ctx := context.Background()
	in, _ := e.create("in", 1, 3000)
	payload := bytes.Repeat([]byte("offload!"), 700) // 5600 bytes
	peer := peerFunc(func(ctx context.Context, req offloadfs.TaskRequest) (offloadfs.TaskResult, error) {
		if len(req.Files) != 2 || req.Files[0].Write || !req.Files[1].Write {
			t.Fatalf("request files %+v", req.Files)
		}
		if got := req.Files[1].Size; got != 64<<10 {
			t.Fatalf("the output is offered %d bytes, want the 64 KiB reserved", got)
		}
		if _, err := e.fsys.Stat("out"); !errors.Is(err, iofs.ErrNotExist) {
			t.Fatalf("the output has a name while the task runs: %v", err)
		}
		if _, err := in.WriteAt([]byte("x"), 0); !errors.Is(err, offloadfs.ErrGranted) {
			t.Fatalf("the owner wrote a granted input: %v", err)
		}
		// Write through the extents the request names, as an engine does.
		if _, err := e.ns.WriteAt(payload, int64(req.Files[1].Extents[0].LBA)*envBS); err != nil {
			t.Fatal(err)
		}
		return offloadfs.TaskResult{Output: []byte("ok"), Written: []uint64{0, uint64(len(payload))}}, nil
	})
	res, err := e.fsys.Offload(ctx, peer, "t", []offloadfs.OffloadFile{{In: in}, {Out: "out", Reserve: 64 << 10}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != "ok" || res.Sizes[1] != int64(len(payload)) {
		t.Fatalf("result %q, sizes %v", res.Output, res.Sizes)
	}
	f, err := e.fsys.Open("out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(payload))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("out reads back wrong (%v)", err)
	}
	fi, _ := f.Stat()
	if blocks := fi.Sys().(*offloadfs.FileInfo).AllocatedBlocks(); blocks != 2 {
		t.Fatalf("out holds %d blocks for %d bytes, want 2: the reserve was not given back", blocks, len(payload))
	}
	// The grant ended with the task.
	if _, err := in.WriteAt([]byte("x"), 0); err != nil {
		t.Fatalf("the owner cannot write its input after the task: %v", err)
	}
}

// TestOffloadRefusesOverlongOutput: a peer claiming more bytes than were
// reserved gets its outputs discarded.
func TestOffloadRefusesOverlongOutput(t *testing.T) {
	e := newRemoteEnv(t, nil)
	ctx := context.Background()
	keep, _ := e.create("out", 1, 1000)
	keep.Close()
	peer := peerFunc(func(context.Context, offloadfs.TaskRequest) (offloadfs.TaskResult, error) {
		return offloadfs.TaskResult{Written: []uint64{8193}}, nil
	})
	_, err := e.fsys.Offload(ctx, peer, "t", []offloadfs.OffloadFile{{Out: "out", Reserve: 8192}}, nil)
	if !errors.Is(err, offloadfs.ErrTaskOutput) {
		t.Fatalf("%v, want ErrTaskOutput", err)
	}
	fi, err := e.fsys.Stat("out")
	if err != nil || fi.Size() != 1000 {
		t.Fatalf("out after a refused task: %v, %v", fi, err)
	}
	if _, err := e.fsys.Offload(ctx, peer, "t", []offloadfs.OffloadFile{{Out: "no/such/dir", Reserve: 8192}}, nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an output in a missing directory: %v", err)
	}
	rep, err := e.fsys.Fsck(ctx)
	if err != nil || !rep.OK() {
		t.Fatalf("fsck: %v %v", rep, err)
	}
}

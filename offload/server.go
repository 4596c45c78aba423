package offload

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nearstore/nearstore/offload/offloadpb"
	"github.com/nearstore/nearstore/pushdown"
)

// maxMessage bounds a gRPC message either way: a task's output
// (MaxOutput) or a request's files and arguments, with room to spare.
const maxMessage = 64 << 20

// Flow-control windows, fixed rather than grown by gRPC's bandwidth
// estimate (which starts at 64 KiB): a task's result is megabytes sent
// at once, and a client whose process is busy (a host decoding images
// on one core) may not get to the connection for milliseconds at a
// time; with a window of a whole result the engine hands the result to
// the kernel and gets on with its next task instead of waiting, 64 KiB
// at a time, for the client to read.
const (
	streamWindow = 16 << 20
	connWindow   = 64 << 20
)

// Server serves an engine over gRPC.
type Server struct {
	offloadpb.UnimplementedEngineServer
	e   *Engine
	srv *grpc.Server
}

// NewServer returns a gRPC server for e.
func NewServer(e *Engine) *Server {
	s := &Server{e: e, srv: grpc.NewServer(grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage),
		grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow))}
	offloadpb.RegisterEngineServer(s.srv, s)
	return s
}

// Serve serves on ln until Stop.
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(ln) }

// Stop stops serving: tasks running get until ctx ends to finish, then
// their clients are cut off (which ends the tasks).
func (s *Server) Stop(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.srv.Stop()
		<-done
	}
}

// Info implements offloadpb.EngineServer.
func (s *Server) Info(context.Context, *offloadpb.InfoRequest) (*offloadpb.InfoReply, error) {
	in := s.e.Info()
	return &offloadpb.InfoReply{
		HostNqn: in.HostNQN, Policy: string(in.Policy), Cpu: in.CPU,
		Running: uint32(in.Running), TokensFree: uint32(in.TokensFree), Tasks: in.Tasks,
	}, nil
}

// Run implements offloadpb.EngineServer.
func (s *Server) Run(ctx context.Context, r *offloadpb.RunRequest) (*offloadpb.RunReply, error) {
	req, err := requestFromPB(r)
	if err != nil {
		return nil, toStatus(err)
	}
	res, err := s.e.Run(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return &offloadpb.RunReply{
		Output: res.Output, Written: res.Written,
		BytesRead: res.Stats.BytesRead, BytesWritten: res.Stats.BytesWritten,
		CacheHits: res.Stats.CacheHits, CacheMisses: res.Stats.CacheMisses,
	}, nil
}

// AcquireToken implements offloadpb.EngineServer.
func (s *Server) AcquireToken(_ context.Context, r *offloadpb.TokenRequest) (*offloadpb.TokenReply, error) {
	id, exp, err := s.e.AcquireToken(r.GetClient())
	if err != nil {
		return nil, toStatus(err)
	}
	return &offloadpb.TokenReply{Token: id, ExpiresUnixNano: exp.UnixNano()}, nil
}

// ReleaseToken implements offloadpb.EngineServer.
func (s *Server) ReleaseToken(_ context.Context, r *offloadpb.TokenRelease) (*offloadpb.TokenReleaseReply, error) {
	s.e.ReleaseToken(r.GetToken())
	return &offloadpb.TokenReleaseReply{}, nil
}

// The errors as gRPC codes, both ways.
var errCodes = []struct {
	err  error
	code codes.Code
}{
	{ErrRejected, codes.ResourceExhausted},
	{ErrUnknownTask, codes.NotFound},
	{ErrOutsideGrant, codes.PermissionDenied},
	{ErrBadRequest, codes.InvalidArgument},
	{ErrTaskEnded, codes.DeadlineExceeded},
}

func toStatus(err error) error {
	for _, m := range errCodes {
		if errors.Is(err, m.err) {
			return status.Error(m.code, err.Error())
		}
	}
	return status.Error(codes.Aborted, err.Error())
}

// fromStatus turns a gRPC error back into the package's errors.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, m := range errCodes {
		if st.Code() == m.code {
			return &remoteError{sentinel: m.err, msg: st.Message()}
		}
	}
	return &remoteError{msg: st.Message(), code: st.Code()}
}

// remoteError is an engine's error, matching the package's sentinel.
type remoteError struct {
	sentinel error
	code     codes.Code
	msg      string
}

func (e *remoteError) Error() string {
	if e.sentinel == nil {
		return "offload: engine: " + e.code.String() + ": " + e.msg
	}
	return "offload: engine: " + e.msg
}

func (e *remoteError) Unwrap() error { return e.sentinel }

func requestFromPB(r *offloadpb.RunRequest) (Request, error) {
	req := Request{Task: r.GetTask(), Module: r.GetModule(), Args: r.GetArgs(), Client: r.GetClient(), Token: r.GetToken()}
	if len(r.GetFiles()) > pushdown.MaxFiles {
		return req, errors.Join(ErrBadRequest, errors.New("too many files"))
	}
	for _, f := range r.GetFiles() {
		tf := File{
			File:       pushdown.File{ID: f.GetInode(), Version: f.GetVersion(), Size: f.GetSize()},
			ContentTag: f.GetContentTag(), Bypass: f.GetBypassCache(),
		}
		switch f.GetMode() {
		case offloadpb.Mode_MODE_READ:
		case offloadpb.Mode_MODE_WRITE:
			tf.Write = true
		default:
			return req, errors.Join(ErrBadRequest, errors.New("a file without a mode"))
		}
		for _, x := range f.GetExtents() {
			tf.Extents = append(tf.Extents, pushdown.Extent{LBA: x.GetLba(), Blocks: x.GetBlocks()})
		}
		req.Files = append(req.Files, tf)
	}
	return req, nil
}

func requestToPB(req Request) *offloadpb.RunRequest {
	r := &offloadpb.RunRequest{Task: req.Task, Module: req.Module, Args: req.Args, Client: req.Client, Token: req.Token}
	for _, f := range req.Files {
		pf := &offloadpb.File{
			Inode: f.ID, Version: f.Version, Size: f.Size, Mode: offloadpb.Mode_MODE_READ,
			ContentTag: f.ContentTag, BypassCache: f.Bypass,
		}
		if f.Write {
			pf.Mode = offloadpb.Mode_MODE_WRITE
		}
		for _, x := range f.Extents {
			pf.Extents = append(pf.Extents, &offloadpb.Extent{Lba: x.LBA, Blocks: x.Blocks})
		}
		r.Files = append(r.Files, pf)
	}
	return r
}

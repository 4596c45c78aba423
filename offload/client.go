package offload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nearstore/nearstore/offload/offloadpb"
	"github.com/nearstore/nearstore/offloadfs"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// Name names the client to engines, for fairness (default: the host
	// name and process ID).
	Name string
	// Local runs the tasks an engine turns away, on this host at once
	// (an engine over the owner's own device, with PolicyNone). Without
	// it a task turned away fails with ErrRejected.
	Local   *Engine
	Metrics *Metrics
}

// Client is an engine as an owner uses it; it is an offloadfs.Peer. Its
// methods are safe for concurrent use.
type Client struct {
	addr string
	opts ClientOptions
	conn *grpc.ClientConn
	rpc  offloadpb.EngineClient

	mu   sync.Mutex
	info *Info // the first Info, for the grantee and the policy
}

var _ offloadfs.Peer = (*Client)(nil)

// Dial returns a client of the engine at addr (host:port). It connects
// lazily, on the first call.
func Dial(addr string, opts ClientOptions) (*Client, error) {
	if opts.Name == "" {
		h, _ := os.Hostname()
		opts.Name = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)))
	if err != nil {
		return nil, fmt.Errorf("offload: dial %s: %w", addr, err)
	}
	return &Client{addr: addr, opts: opts, conn: conn, rpc: offloadpb.NewEngineClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Addr returns the engine's address.
func (c *Client) Addr() string { return c.addr }

// connectWait is how long Info waits for an engine that is not (yet)
// listening, when ctx allows longer: an engine started a moment ago is
// found, a wrong address still fails soon.
const connectWait = 10 * time.Second

// Info asks the engine for its description and load.
func (c *Client) Info(ctx context.Context) (Info, error) {
	ctx, cancel := context.WithTimeout(ctx, connectWait)
	defer cancel()
	r, err := c.rpc.Info(ctx, &offloadpb.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return Info{}, fmt.Errorf("offload: engine %s: %w", c.addr, fromStatus(err))
	}
	in := Info{
		HostNQN: r.GetHostNqn(), Policy: Policy(r.GetPolicy()), CPU: r.GetCpu(),
		Running: int(r.GetRunning()), TokensFree: int(r.GetTokensFree()), Tasks: r.GetTasks(),
	}
	c.mu.Lock()
	if c.info == nil {
		c.info = &in
	}
	c.mu.Unlock()
	return in, nil
}

func (c *Client) cachedInfo(ctx context.Context) (Info, error) {
	c.mu.Lock()
	in := c.info
	c.mu.Unlock()
	if in != nil {
		return *in, nil
	}
	return c.Info(ctx)
}

// Grantee implements offloadfs.Peer: the engine's host NQN.
func (c *Client) Grantee(ctx context.Context) (string, error) {
	in, err := c.cachedInfo(ctx)
	return in.HostNQN, err
}

// RunTask implements offloadfs.Peer.
func (c *Client) RunTask(ctx context.Context, r offloadfs.TaskRequest) (offloadfs.TaskResult, error) {
	req := Request{Task: r.Task, Module: r.Module, Args: r.Args, Client: c.opts.Name}
	for _, f := range r.Files {
		req.Files = append(req.Files, File{File: f.File, Write: f.Write, ContentTag: f.ContentTag, Bypass: f.Bypass})
	}
	res, local, err := c.Run(ctx, req)
	if err != nil {
		return offloadfs.TaskResult{}, err
	}
	return offloadfs.TaskResult{Output: res.Output, Written: res.Written, Local: local}, nil
}

// Run runs req on the engine, or, if the engine turns it away (no token
// under PolicyTokens, CPU above the threshold under PolicyCPU), on the
// local engine at once; local says which.
func (c *Client) Run(ctx context.Context, req Request) (_ Result, local bool, _ error) {
	req.Client = c.opts.Name
	in, err := c.cachedInfo(ctx)
	if err != nil {
		return Result{}, false, err
	}
	if in.Policy == PolicyTokens {
		t, err := c.rpc.AcquireToken(ctx, &offloadpb.TokenRequest{Client: c.opts.Name})
		if err != nil {
			if err := fromStatus(err); !errors.Is(err, ErrRejected) {
				return Result{}, false, fmt.Errorf("offload: engine %s: %w", c.addr, err)
			}
			c.opts.Metrics.rejectedFor("token")
			return c.runLocal(ctx, req)
		}
		req.Token = t.GetToken()
		defer func() {
			// The token expires anyway; a release that fails costs
			// the engine a token until then.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_, _ = c.rpc.ReleaseToken(rctx, &offloadpb.TokenRelease{Token: req.Token})
		}()
	}
	r, err := c.rpc.Run(ctx, requestToPB(req))
	if err != nil {
		err = fromStatus(err)
		if errors.Is(err, ErrRejected) {
			c.opts.Metrics.rejectedFor(string(in.Policy))
			return c.runLocal(ctx, req)
		}
		return Result{}, false, fmt.Errorf("offload: engine %s: %w", c.addr, err)
	}
	c.opts.Metrics.ranAt("engine")
	return Result{
		Output: r.GetOutput(), Written: r.GetWritten(),
		Stats: Stats{BytesRead: r.GetBytesRead(), BytesWritten: r.GetBytesWritten(), CacheHits: r.GetCacheHits(), CacheMisses: r.GetCacheMisses()},
	}, false, nil
}

func (c *Client) runLocal(ctx context.Context, req Request) (Result, bool, error) {
	if c.opts.Local == nil {
		return Result{}, false, fmt.Errorf("offload: engine %s turned the task away and there is no local engine: %w", c.addr, ErrRejected)
	}
	req.Token = 0
	res, err := c.opts.Local.Run(ctx, req)
	if err != nil {
		return Result{}, true, fmt.Errorf("offload: running %s locally: %w", req.Task, err)
	}
	c.opts.Metrics.ranAt("local")
	return res, true, nil
}

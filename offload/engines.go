package offload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Engines is the set of engines an owner knows, by address, with a
// client for each: the list nearstore offers so the application can
// choose a peer by its load (the file system's owner chooses; nothing
// here picks for it). Its methods are safe for concurrent use.
type Engines struct {
	opts ClientOptions

	mu      sync.Mutex
	order   []string // addresses, in the order added
	clients map[string]*Client
}

// NewEngines returns an empty set whose clients use opts.
func NewEngines(opts ClientOptions) *Engines {
	return &Engines{opts: opts, clients: map[string]*Client{}}
}

// Add adds the engine at addr (host:port) and returns its client; an
// address added already returns the client it has.
func (es *Engines) Add(addr string) (*Client, error) {
	es.mu.Lock()
	defer es.mu.Unlock()
	if c, ok := es.clients[addr]; ok {
		return c, nil
	}
	c, err := Dial(addr, es.opts)
	if err != nil {
		return nil, err
	}
	es.clients[addr] = c
	es.order = append(es.order, addr)
	return c, nil
}

// Remove forgets the engine at addr and closes its client.
func (es *Engines) Remove(addr string) error {
	es.mu.Lock()
	c, ok := es.clients[addr]
	delete(es.clients, addr)
	es.order = slices.DeleteFunc(es.order, func(a string) bool { return a == addr })
	es.mu.Unlock()
	if !ok {
		return fmt.Errorf("offload: no engine %s", addr)
	}
	return c.Close()
}

// Client returns the client of the engine at addr.
func (es *Engines) Client(addr string) (*Client, bool) {
	es.mu.Lock()
	defer es.mu.Unlock()
	c, ok := es.clients[addr]
	return c, ok
}

// EngineLoad is an engine as Engines.List found it: its description and
// load, or why it did not answer.
type EngineLoad struct {
	Addr string `json:"addr"`
	Info
	// Err is why the engine did not answer (Info is then zero); Error
	// is its text, for JSON.
	Err   error  `json:"-"`
	Error string `json:"error,omitempty"`
}

// List asks every engine, all at once, for its description and load
// (CPU use, tasks running, tokens free), and returns them in the order
// the engines were added. An engine that does not answer before ctx ends
// (or within a few seconds) is listed with its error.
func (es *Engines) List(ctx context.Context) []EngineLoad {
	es.mu.Lock()
	out := make([]EngineLoad, len(es.order))
	cs := make([]*Client, len(es.order))
	for i, a := range es.order {
		out[i].Addr, cs[i] = a, es.clients[a]
	}
	es.mu.Unlock()
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, err := c.Info(ctx)
			out[i].Info, out[i].Err = in, err
			if err != nil {
				out[i].Error = err.Error()
			}
		}()
	}
	wg.Wait()
	return out
}

// Close closes every client.
func (es *Engines) Close() error {
	es.mu.Lock()
	defer es.mu.Unlock()
	var errs []error
	for _, a := range es.order {
		errs = append(errs, es.clients[a].Close())
	}
	es.order, es.clients = nil, map[string]*Client{}
	return errors.Join(errs...)
}

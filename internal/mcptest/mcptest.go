// Package mcptest drives an mcprel server from tests at the wire level: a
// Client writes raw JSON-RPC frames into a real transport and reads back
// exactly what the server wrote, in order, so tests can assert both what
// arrives and that nothing else does.
//
// Races are forced with a Gate, a tool that blocks until the test releases
// it; nothing here sleeps to wait for the server.
package mcptest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

// Timeout is the safety net on every wait: a wait that reaches it fails
// the test. It never decides an outcome; a passing test never reaches it.
const Timeout = 10 * time.Second

// Frame is one message the server wrote.
type Frame struct {
	Raw    string
	ID     *jsonrpc.ID
	Method string
	Params json.RawMessage
	Result json.RawMessage
	Error  *jsonrpc.Error
}

// IsResponseTo reports whether the frame is the response to id.
func (f Frame) IsResponseTo(id jsonrpc.ID) bool {
	return f.ID != nil && *f.ID == id && f.Method == ""
}

// Client is a raw-frame client connected to a server.
type Client struct {
	t      testing.TB
	w      io.WriteCloser
	frames chan Frame
	done   chan error // Serve's result
	conn   *stdio.Conn
	closed bool
}

// Stdio connects a client to srv through a stdio.Conn over in-memory pipes.
// The connection is closed when the test ends.
func Stdio(t testing.TB, srv *server.Server, opts *stdio.Options) *Client {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &Client{t: t, w: inW, frames: make(chan Frame, 1<<16), done: make(chan error, 1)}
	c.conn = stdio.NewConn(srv, inR, outW, opts)
	go func() {
		err := c.conn.Serve(context.Background())
		outW.Close()
		c.done <- err
	}()
	go c.read(outR)
	t.Cleanup(func() {
		c.CloseInput()
		select {
		case <-c.done:
		case <-time.After(Timeout):
			t.Errorf("mcptest: server did not stop after its input closed")
		}
	})
	return c
}

func (c *Client) read(r io.Reader) {
	defer close(c.frames)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		c.frames <- parseFrame(sc.Text())
	}
}

// Frames returns the frames the server writes, in order; it is closed when
// the server closes its output.
func (c *Client) Frames() <-chan Frame { return c.frames }

// Conn returns the server side of the connection.
func (c *Client) Conn() *stdio.Conn { return c.conn }

// Send writes one raw frame (a newline is added).
func (c *Client) Send(frame string) {
	c.t.Helper()
	if _, err := io.WriteString(c.w, frame+"\n"); err != nil {
		c.t.Fatalf("mcptest: writing a frame: %v", err)
	}
}

// SendJSON encodes v and writes it as one frame.
func (c *Client) SendJSON(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.Send(string(b))
}

// Request writes a request with an integer id.
func (c *Client) Request(id int64, method string, params any) {
	c.t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	c.SendJSON(msg)
}

// Notify writes a notification.
func (c *Client) Notify(method string, params any) {
	c.t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	c.SendJSON(msg)
}

// Cancel writes notifications/cancelled for an integer id.
func (c *Client) Cancel(id int64, reason string) {
	c.t.Helper()
	c.Notify(mcp.NotificationCancelled, map[string]any{"requestId": id, "reason": reason})
}

// Next returns the next frame the server wrote.
func (c *Client) Next() Frame {
	c.t.Helper()
	select {
	case f, ok := <-c.frames:
		if !ok {
			c.t.Fatalf("mcptest: the server closed its output")
		}
		return f
	case <-time.After(Timeout):
		c.t.Fatalf("mcptest: no frame from the server within %v", Timeout)
	}
	panic("unreachable")
}

// Await reads frames until the response to id and returns it together
// with every frame read before it.
func (c *Client) Await(id int64) (Frame, []Frame) {
	c.t.Helper()
	var before []Frame
	for {
		f := c.Next()
		if f.IsResponseTo(jsonrpc.IntID(id)) {
			return f, before
		}
		before = append(before, f)
	}
}

// Call sends a request and returns its response, failing the test if any
// other frame arrives first.
func (c *Client) Call(id int64, method string, params any) Frame {
	c.t.Helper()
	c.Request(id, method, params)
	f, before := c.Await(id)
	if len(before) > 0 {
		c.t.Fatalf("mcptest: unexpected frames before the response to %d: %v", id, raws(before))
	}
	return f
}

// Sync proves that everything the server wrote before this point has been
// read: it sends a ping (legacy) or server/discover (modern) with id and
// returns the frames that arrived before its answer.
func (c *Client) Sync(id int64, era mcp.Era) []Frame {
	c.t.Helper()
	if era == mcp.Modern {
		c.Request(id, mcp.MethodDiscover, ModernParams(nil))
	} else {
		c.Request(id, mcp.MethodPing, nil)
	}
	_, before := c.Await(id)
	return before
}

// ExpectEOF asserts the server closes its output with nothing more written.
func (c *Client) ExpectEOF() {
	c.t.Helper()
	select {
	case f, ok := <-c.frames:
		if ok {
			c.t.Fatalf("mcptest: expected the output to end, got %s", f.Raw)
		}
	case <-time.After(Timeout):
		c.t.Fatalf("mcptest: the server did not close its output")
	}
}

// CloseInput closes the server's input, as a client does to end a stdio
// connection.
func (c *Client) CloseInput() {
	if !c.closed {
		c.closed = true
		c.w.Close()
	}
}

// ServeResult waits for the connection's Serve to return.
func (c *Client) ServeResult() error {
	c.t.Helper()
	select {
	case err := <-c.done:
		c.done <- err
		return err
	case <-time.After(Timeout):
		c.t.Fatalf("mcptest: Serve did not return")
	}
	return nil
}

func raws(fs []Frame) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString("\n  ")
		b.WriteString(f.Raw)
	}
	return b.String()
}

// Raws renders frames for failure messages.
func Raws(fs []Frame) string { return raws(fs) }

// ModernParams returns params carrying the modern era's required _meta,
// merged with extra.
func ModernParams(extra map[string]any) map[string]any {
	p := map[string]any{"_meta": map[string]any{
		mcp.MetaProtocolVersion:    mcp.Version20260728,
		mcp.MetaClientCapabilities: map[string]any{},
		mcp.MetaClientInfo:         map[string]any{"name": "mcptest", "version": "1"},
	}}
	for k, v := range extra {
		if k == "_meta" {
			for mk, mv := range v.(map[string]any) {
				p["_meta"].(map[string]any)[mk] = mv
			}
			continue
		}
		p[k] = v
	}
	return p
}

// Params returns params for the given era: modern ones carry _meta.
func Params(era mcp.Era, extra map[string]any) map[string]any {
	if era == mcp.Modern {
		return ModernParams(extra)
	}
	if extra == nil {
		return map[string]any{}
	}
	return extra
}

// Initialize performs the legacy handshake with id 0.
func (c *Client) Initialize(version string) Frame {
	c.t.Helper()
	f := c.Call(0, mcp.MethodInitialize, map[string]any{
		"protocolVersion": version,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "mcptest", "version": "1"},
	})
	if f.Error != nil {
		c.t.Fatalf("mcptest: initialize failed: %s", f.Raw)
	}
	c.Notify(mcp.NotificationInitialized, nil)
	return f
}

// Open prepares a connection for era: the legacy handshake, or nothing.
func (c *Client) Open(era mcp.Era) {
	c.t.Helper()
	if era == mcp.Legacy {
		c.Initialize(mcp.Version20251125)
	}
}

// Gate is a tool that blocks until the test releases it, so a test can put
// a request in flight and decide what happens first.
type Gate struct {
	// Entered receives the request id each time a call starts.
	Entered chan jsonrpc.ID
	// Exited receives the cause when a call sees its context end.
	Exited  chan error
	release chan struct{}
	once    sync.Once
}

// NewGate registers a gate tool named name on srv.
func NewGate(t testing.TB, srv *server.Server, name string) *Gate {
	t.Helper()
	g := &Gate{Entered: make(chan jsonrpc.ID, 64), Exited: make(chan error, 64), release: make(chan struct{})}
	err := srv.AddTool(server.Tool{Name: name, Description: "blocks until released"},
		func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			g.Entered <- req.ID
			select {
			case <-g.release:
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("released " + req.ID.String())}}, nil
			case <-ctx.Done():
				g.Exited <- context.Cause(ctx)
				// Return a result anyway: the runtime must discard it.
				<-g.release
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("late " + req.ID.String())}}, nil
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Release lets every blocked and future call of the gate return.
func (g *Gate) Release() { g.once.Do(func() { close(g.release) }) }

// WaitEntered waits for a call to start and returns its id.
func (g *Gate) WaitEntered(t testing.TB) jsonrpc.ID {
	t.Helper()
	select {
	case id := <-g.Entered:
		return id
	case <-time.After(Timeout):
		t.Fatalf("mcptest: gate not entered")
	}
	return jsonrpc.ID{}
}

// WaitExited waits for a blocked call to see its context end.
func (g *Gate) WaitExited(t testing.TB) error {
	t.Helper()
	select {
	case err := <-g.Exited:
		return err
	case <-time.After(Timeout):
		t.Fatalf("mcptest: gate call not cancelled")
	}
	return nil
}

// Recorder is an observer (server.HandlerObserver and
// server.EventObserver) that collects the server's request starts,
// terminal records, handler returns and events.
type Recorder struct {
	mu       sync.Mutex
	started  []server.RequestInfo
	requests []server.RequestRecord
	handlers []server.HandlerRecord
	events   []server.Event
	changed  chan struct{} // closed and replaced on every new record
}

// NewRecorder returns a recorder; pass Hook(opts) to server.New.
func NewRecorder() *Recorder {
	return &Recorder{changed: make(chan struct{})}
}

// Hook adds the recorder to opts' observers and returns opts.
func (r *Recorder) Hook(opts *server.Options) *server.Options {
	if opts == nil {
		opts = &server.Options{}
	}
	opts.Observers = append(opts.Observers, r)
	return opts
}

// RequestStarted implements server.Observer.
func (r *Recorder) RequestStarted(ctx context.Context, info server.RequestInfo) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, info)
	r.notifyLocked()
	return ctx
}

// RequestEnded implements server.Observer.
func (r *Recorder) RequestEnded(_ context.Context, rec server.RequestRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, rec)
	r.notifyLocked()
}

// HandlerReturned implements server.HandlerObserver.
func (r *Recorder) HandlerReturned(_ context.Context, rec server.HandlerRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers = append(r.handlers, rec)
	r.notifyLocked()
}

// ObserveEvent implements server.EventObserver.
func (r *Recorder) ObserveEvent(ev server.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	r.notifyLocked()
}

// Events returns every event seen so far.
func (r *Recorder) Events() []server.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// AllRequests returns every terminal record seen so far.
func (r *Recorder) AllRequests() []server.RequestRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests)
}

// Started returns the RequestInfo of every request started so far.
func (r *Recorder) Started() []server.RequestInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.started)
}

func (r *Recorder) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// waitFor polls find under the lock each time a record arrives.
func waitFor[T any](t testing.TB, r *Recorder, what string, find func() (T, bool)) T {
	t.Helper()
	deadline := time.After(Timeout)
	for {
		r.mu.Lock()
		v, ok := find()
		changed := r.changed
		r.mu.Unlock()
		if ok {
			return v
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("mcptest: no %s", what)
		}
	}
}

// WaitRequest waits for the terminal record of request id.
func (r *Recorder) WaitRequest(t testing.TB, id jsonrpc.ID) server.RequestRecord {
	t.Helper()
	return waitFor(t, r, "terminal record for request "+id.String(), func() (server.RequestRecord, bool) {
		for _, rec := range r.requests {
			if rec.ID == id {
				return rec, true
			}
		}
		return server.RequestRecord{}, false
	})
}

// WaitRecord waits for a terminal record that match accepts.
func (r *Recorder) WaitRecord(t testing.TB, what string, match func(server.RequestRecord) bool) server.RequestRecord {
	t.Helper()
	return waitFor(t, r, what, func() (server.RequestRecord, bool) {
		for _, rec := range r.requests {
			if match(rec) {
				return rec, true
			}
		}
		return server.RequestRecord{}, false
	})
}

// WaitHandler waits for the handler of request id to return.
func (r *Recorder) WaitHandler(t testing.TB, id jsonrpc.ID) server.HandlerRecord {
	t.Helper()
	return waitFor(t, r, "handler return for request "+id.String(), func() (server.HandlerRecord, bool) {
		for _, rec := range r.handlers {
			if rec.ID == id {
				return rec, true
			}
		}
		return server.HandlerRecord{}, false
	})
}

// Requests returns every terminal record of id seen so far.
func (r *Recorder) Requests(id jsonrpc.ID) []server.RequestRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []server.RequestRecord
	for _, rec := range r.requests {
		if rec.ID == id {
			out = append(out, rec)
		}
	}
	return out
}

// NewServer returns a server for tests, with logs discarded unless opts
// sets a logger.
func NewServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	if opts == nil {
		opts = &server.Options{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	srv, err := server.New(mcp.Implementation{Name: "mcptest", Version: "1"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// AddEcho registers the echo tool the benchmarks call: {text} in, the
// same text out, as one text block.
func AddEcho(t testing.TB, srv *server.Server) {
	t.Helper()
	type echoArgs struct {
		Text string `json:"text"`
	}
	err := server.AddTypedTool(srv, server.Tool{Name: "echo"}, func(ctx context.Context, req *server.CallRequest, in echoArgs) (string, error) {
		return in.Text, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

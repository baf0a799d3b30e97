package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// DialStdio starts command (its path and arguments) as an MCP server over
// stdin and stdout and connects to it. The process belongs to the client:
// Close ends it.
func DialStdio(ctx context.Context, command []string, opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.fill()
	if len(command) == 0 {
		return nil, errors.New("client: DialStdio needs a command")
	}
	stats := &counters{}
	t, err := spawn(command, o, stats)
	if err != nil {
		return nil, err
	}
	c, err := newClient(ctx, t, o, stats)
	if err == nil && o.Restart {
		c.redial = func() (transport, error) { return spawn(command, o, stats) }
	}
	return c, err
}

// spawn starts command as a stdio server.
func spawn(command []string, o Options, stats *counters) (transport, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stderr = o.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("client: starting %s: %w", command[0], err)
	}
	return newStdio(cmd, in, out, o, stats), nil
}

// Connect speaks to an MCP server over a pair of streams, newline-delimited
// as on stdio: an in-process server, a socket, a pipe to a process the
// caller runs itself. Close closes w.
func Connect(ctx context.Context, r io.Reader, w io.WriteCloser, opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.fill()
	stats := &counters{}
	return newClient(ctx, newStdio(nil, w, r, o, stats), o, stats)
}

// maxAbandoned bounds how many given-up ids the stdio transport remembers
// to recognise their late responses.
const maxAbandoned = 1024

// stdioTransport speaks newline-delimited JSON-RPC to a child process.
type stdioTransport struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	opts  Options
	stats *counters

	wmu sync.Mutex // serialises writes to stdin

	mu        sync.Mutex
	pending   map[jsonrpc.ID]*exchange
	byToken   map[string]*exchange
	abandoned map[jsonrpc.ID]bool
	order     []jsonrpc.ID // abandoned ids, oldest first
	dead      bool         // the server's output ended
}

func newStdio(cmd *exec.Cmd, in io.WriteCloser, out io.Reader, o Options, stats *counters) *stdioTransport {
	t := &stdioTransport{cmd: cmd, in: in, opts: o, stats: stats,
		pending: map[jsonrpc.ID]*exchange{}, byToken: map[string]*exchange{}, abandoned: map[jsonrpc.ID]bool{}}
	go t.read(out)
	return t
}

func (t *stdioTransport) initialized(string) {}

// ready has nothing to wait for: stdio is one stream both ways.
func (t *stdioTransport) ready(context.Context, time.Duration) {}

// write frames one message.
func (t *stdioTransport) write(b []byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	_, err := t.in.Write(append(b, '\n'))
	return err
}

func (t *stdioTransport) start(ctx context.Context, req outgoing) (*exchange, error) {
	ex := newExchange(t.stats)
	ex.token, ex.notes = req.token, req.notes
	t.mu.Lock()
	if t.dead {
		t.mu.Unlock()
		return nil, ErrConnectionLost
	}
	t.pending[req.id] = ex
	if req.token != "" {
		t.byToken[req.token] = ex
	}
	t.mu.Unlock()
	forget := func(abandon bool) {
		t.mu.Lock()
		delete(t.pending, req.id)
		delete(t.byToken, req.token)
		if abandon {
			t.abandoned[req.id] = true
			t.order = append(t.order, req.id)
			if len(t.order) > maxAbandoned {
				delete(t.abandoned, t.order[0])
				t.order = t.order[1:]
			}
		}
		t.mu.Unlock()
	}
	ex.onFinish = func() { forget(false) }
	ex.onCancel = func(id jsonrpc.ID, reason string) {
		forget(true)
		// Both eras cancel a stdio request with a notification.
		params, _ := json.Marshal(mcp.CancelledParams{RequestID: id, Reason: reason})
		t.write(jsonrpc.AppendNotification(nil, mcp.NotificationCancelled, params))
	}
	if err := t.write(jsonrpc.AppendRequest(nil, req.id, req.method, req.params)); err != nil {
		forget(false)
		return nil, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	return ex, nil
}

func (t *stdioTransport) notify(ctx context.Context, method string, params any, _ mcp.Era) error {
	frame, err := notification(method, params)
	if err != nil {
		return err
	}
	return t.write(frame)
}

// read routes what the server writes: responses by id, progress by token;
// it answers the server's own requests it cannot serve, and ping.
func (t *stdioTransport) read(out io.Reader) {
	r := bufio.NewReaderSize(out, 64<<10)
	defer t.lost()
	for {
		line, err := readLine(r, t.opts.MaxMessageBytes)
		if len(bytes.TrimSpace(line)) > 0 {
			t.dispatch(line)
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one line of at most max bytes; a longer one is skipped.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) <= max {
			line = append(line, chunk...)
		} else {
			line = line[:0:0] // too long: keep reading to its end, then drop it
			max = -1
		}
		if err != bufio.ErrBufferFull {
			if max < 0 {
				return nil, err
			}
			return line, err
		}
	}
}

func (t *stdioTransport) dispatch(line []byte) {
	m, derr := jsonrpc.Decode(line)
	if derr != nil {
		t.opts.Logger.Warn("the server wrote a message that is not JSON-RPC", "err", derr.Message)
		return
	}
	switch m.Kind {
	case jsonrpc.KindResponse:
		t.mu.Lock()
		ex := t.pending[m.ID]
		late := t.abandoned[m.ID]
		delete(t.abandoned, m.ID)
		if ex != nil {
			// Delivered once: a duplicate response is unknown.
			delete(t.pending, m.ID)
			delete(t.byToken, ex.token)
		}
		t.mu.Unlock()
		switch {
		case ex != nil:
			ex.deliver(reply{m: m})
		case late:
			t.stats.late.Add(1)
			t.opts.Logger.Debug("ignored a response to a call the client gave up on", "id", m.ID)
		default:
			t.opts.Logger.Warn("the server answered a request the client never sent", "id", m.ID)
		}
	case jsonrpc.KindNotification:
		if m.Method != mcp.NotificationProgress {
			// A listen stream's notification names its request.
			if id, ok := subscriptionOf(m.Params); ok {
				t.mu.Lock()
				ex := t.pending[id]
				t.mu.Unlock()
				if ex != nil && ex.notes != nil {
					ex.notes(m)
				}
			}
			return
		}
		token, p, ok := progressOf(m.Params)
		if !ok {
			return
		}
		t.mu.Lock()
		ex := t.byToken[token]
		t.mu.Unlock()
		if ex != nil {
			ex.deliverProgress(p)
		}
	case jsonrpc.KindRequest:
		// Answered on its own goroutine: a handler that asks its user
		// must not stop the reader.
		go t.write(serveRequest(context.Background(), t.opts.OnRequest, m))
	}
}

// lost ends every call in flight once the server's output ends.
func (t *stdioTransport) lost() {
	t.mu.Lock()
	t.dead = true
	pending := t.pending
	t.pending, t.byToken = map[jsonrpc.ID]*exchange{}, map[string]*exchange{}
	t.mu.Unlock()
	for _, ex := range pending {
		ex.lose()
	}
}

// close ends the child the way MCP's stdio transport says: stdin closed,
// then SIGTERM, then SIGKILL, grace apart.
func (t *stdioTransport) close(grace time.Duration) error {
	err := t.in.Close()
	if t.cmd == nil {
		return err // Connect: the streams are the caller's
	}
	done := make(chan error, 1)
	go func() { done <- t.cmd.Wait() }()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		timer := time.NewTimer(grace)
		select {
		case err := <-done:
			timer.Stop()
			return exitError(err)
		case <-timer.C:
			t.opts.Logger.Warn("the server did not exit; signalling it", "signal", sig.String())
			t.cmd.Process.Signal(sig)
		}
	}
	return exitError(<-done)
}

// exitError keeps a server's nonzero exit from reading as a client
// failure: the client closed it.
func exitError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil
	}
	return err
}

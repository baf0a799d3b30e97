package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
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
	if err == nil && (o.Restart || o.Supervise != nil) {
		c.redial = func(context.Context) (transport, error) { return spawn(command, o, stats) }
		c.restartOnCall = o.Supervise == nil
		c.superviseIf(o.Supervise)
	}
	return c, err
}

// spawn starts command as a stdio server.
func spawn(command []string, o Options, stats *counters) (transport, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stderr = o.Stderr
	ownGroup(cmd)
	// Once the server has exited, what it started may still hold its
	// stderr open: Close waits for that no longer than StopGrace.
	cmd.WaitDelay = o.StopGrace
	switch {
	case o.Environ != nil:
		cmd.Env = append(slices.Clone(o.Environ), o.Env...)
	case len(o.Env) > 0:
		cmd.Env = append(os.Environ(), o.Env...)
	}
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

// stdioTransport speaks newline-delimited JSON-RPC to a child process.
type stdioTransport struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	opts  Options
	stats *counters

	w        *writer // everything written to stdin, from one goroutine
	answers  budget  // the server's requests being answered
	lifetime context.Context
	stop     context.CancelFunc // ends the handlers of the server's requests

	calls    *inflight // dead once the server's output ended
	gone     chan struct{}
	goneOnce sync.Once
}

func newStdio(cmd *exec.Cmd, in io.WriteCloser, out io.Reader, o Options, stats *counters) *stdioTransport {
	t := &stdioTransport{cmd: cmd, in: in, opts: o, stats: stats,
		answers: budget{maxN: o.MaxServerRequests, maxBytes: o.MaxServerRequestBytes}, calls: newInflight(), gone: make(chan struct{})}
	t.lifetime, t.stop = context.WithCancel(context.Background())
	t.w = newWriter(in, func(error) { t.lost() })
	go t.read(out)
	return t
}

func (t *stdioTransport) initialized(string) {}

// ready has nothing to wait for: stdio is one stream both ways.
func (t *stdioTransport) ready(context.Context, time.Duration) {}

func (t *stdioTransport) start(ctx context.Context, req outgoing) (*exchange, error) {
	ex := newExchange(ctx, req, t.stats)
	ex.owner, ex.id = t, req.id
	if !t.calls.add(req, ex) {
		return nil, ErrConnectionLost
	}
	// The request is queued under ctx (the call's clocks), waiting for
	// room, not for its write: the call waits for its answer anyway, and
	// if its clocks fire first one still queued is withdrawn (cancelled),
	// never to leave. A write that fails loses the connection, and the
	// call with it.
	f, err := t.w.enqueueFrame(ctx, jsonrpc.AppendRequest(nil, req.id, req.method, req.params))
	if err != nil {
		t.calls.forget(req.id, req.token, false)
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	ex.frame = f
	return ex, nil
}

// finished releases a request whose response arrived.
func (t *stdioTransport) finished(ex *exchange) { t.calls.forget(ex.id, ex.token, false) }

// cancelled withdraws a request still queued, or tells the server it is
// cancelled, and releases it.
func (t *stdioTransport) cancelled(ex *exchange, id jsonrpc.ID, reason string) Cancellation {
	if ex.frame.withdraw() {
		// Still queued: it never reaches the server, and needs no
		// cancellation.
		t.calls.forget(ex.id, ex.token, false)
		return RequestNotSent
	}
	t.calls.forget(ex.id, ex.token, true)
	// Both eras cancel a stdio request with a notification. It is
	// queued, never waited for: a server that stops reading must not
	// hold the caller who gives up on it. Its write is followed for
	// WaitCancellations.
	params, _ := json.Marshal(mcp.CancelledParams{RequestID: id, Reason: reason})
	cf := &frame{b: append(jsonrpc.AppendNotification(nil, mcp.NotificationCancelled, params), '\n'), done: make(chan error, 1)}
	cf.after = func() { t.stats.cancels.done(<-cf.done) } // done is sent before after runs
	t.stats.cancels.add()
	if err := t.w.enqueue(context.Background(), cf, false); err != nil {
		t.stats.cancels.done(err)
		t.opts.Logger.Warn("could not send the cancellation", "id", id, "err", err)
		return CancelNotSent
	}
	return CancelQueued
}

func (t *stdioTransport) notify(ctx context.Context, method string, params any, _ mcp.Era) error {
	frame, err := notification(method, params)
	if err != nil {
		return err
	}
	if _, err := t.w.send(ctx, frame); err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	return nil
}

// read routes what the server writes: responses by id, progress by token;
// it answers the server's own requests it cannot serve, and ping.
//
// A line past the message limit is read to its end and dropped, never
// held; what could be read of its id fails the call it answers at once
// with a *ResponseTooLargeError, as over HTTP, rather than leave that
// call waiting for an answer that came and was dropped.
func (t *stdioTransport) read(out io.Reader) {
	r := bufio.NewReaderSize(out, 64<<10)
	defer t.lost()
	scan := new(jsonrpc.IDScanner) // fed only the bytes of a line dropped for its size
	for {
		line, err := readLine(r, t.opts.MaxMessageBytes, scan)
		if line == nil && err == nil { // a whole line, past the limit
			t.tooLarge(scan)
			*scan = jsonrpc.IDScanner{}
		}
		if len(bytes.TrimSpace(line)) > 0 {
			t.dispatch(line)
		}
		if err != nil {
			return
		}
	}
}

// tooLarge fails the call whose response ran past the limit, when what
// could be read of it names one.
func (t *stdioTransport) tooLarge(scan *jsonrpc.IDScanner) {
	id, ok := tooLargeResponse(scan)
	t.opts.Logger.Warn("dropped a line past the message limit", "limit", t.opts.MaxMessageBytes, "id", id)
	if ok {
		t.calls.respond(id, reply{err: &ResponseTooLargeError{Limit: t.opts.MaxMessageBytes}}, t.stats, t.opts.Logger)
	}
}

// readLine reads one line of at most max bytes. A longer one is read to
// its end and dropped, its bytes written to drop (when set) on the way,
// and reported as a nil line with a nil error.
func readLine(r *bufio.Reader, max int, drop io.Writer) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		switch {
		case max >= 0 && len(line)+len(chunk) <= max:
			line = append(line, chunk...)
		default: // too long: keep reading to its end, then drop it
			if drop != nil {
				drop.Write(line)
				drop.Write(chunk)
			}
			line = line[:0:0]
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
		t.calls.respond(m.ID, reply{m: m}, t.stats, t.opts.Logger)
	case jsonrpc.KindNotification:
		if m.Method != mcp.NotificationProgress {
			// A listen stream's notification names its request; the
			// others are the connection's.
			if id, ok := subscriptionOf(m.Params); ok {
				if ex := t.calls.call(id); ex != nil && ex.takesNotes() {
					ex.note(m)
				}
				return
			}
			if t.opts.OnNotification != nil {
				t.opts.OnNotification(m.Method, m.Params)
			}
			return
		}
		token, p, ok := progressOf(m.Params)
		if !ok {
			return
		}
		if ex := t.calls.progress(token); ex != nil {
			ex.deliverProgress(p)
		}
	case jsonrpc.KindRequest:
		t.serve(m)
	}
}

// serve answers a request of the server's without ever stopping the
// reader: ping and what the client cannot serve at once, a handler's
// request on a goroutine of its own, at most Options.MaxServerRequests
// (and MaxServerRequestBytes of params) at a time. Past that bound the request
// is refused with CodeOverloaded. An answer the reader gives (a ping's, a
// refusal) that finds the write queue's share for answers full (the
// server is not reading them) is dropped; a handler's answer waits for
// room on its own goroutine, as long as its handler could have run — a
// burst of requests answered at once, one for each of many calls in
// flight, is a server that reads on and waits for every answer — and is
// dropped only then. Both are counted.
//
// stdio carries nothing that ties a server's request to a call, so it is
// the call's (CallOptions.OnRequest) only while that call is the one in
// flight; otherwise it is the connection's (Options.OnRequest).
//
// Only an answer a call's handler gave restarts that call's idle clock:
// a ping, or a request refused, says nothing of the call's progress.
func (t *stdioTransport) serve(m jsonrpc.Message) {
	ex := t.calls.sole()
	if m.Method == mcp.MethodPing || (t.opts.OnRequest == nil && (ex == nil || ex.onRequest == nil)) {
		t.answer(m, serveRequest(t.lifetime, nil, m), nil)
		return
	}
	size := len(m.Params)
	if !t.answers.take(size) {
		t.stats.serverRefused.Add(1)
		t.answer(m, jsonrpc.AppendError(nil, m.ID, jsonrpc.NewError(mcp.CodeOverloaded,
			"this client is already answering %d requests from this server", t.opts.MaxServerRequests)), nil)
		return
	}
	a := answererFor(ex, t.opts.OnRequest, t.lifetime)
	go func() {
		defer a.done()
		b := a.answer(m)
		if b == nil {
			t.answers.give(size)
			t.opts.Logger.Debug("the call ended while its handler answered the server's request; no answer sent", "method", m.Method)
			return
		}
		t.answerWithin(a.ctx, m, b, func() { t.answers.give(size) })
	}()
}

// answerWithin is answer for an answer that may wait for room in the
// queue until ctx ends (a handler's, on a goroutine of its own).
func (t *stdioTransport) answerWithin(ctx context.Context, m jsonrpc.Message, b []byte, after func()) {
	if err := t.w.postWithin(ctx, b, after); err != nil {
		t.stats.serverDropped.Add(1)
		t.opts.Logger.Debug("dropped the answer to the server's request", "method", m.Method, "err", err)
		after()
	}
}

// answer queues the answer to the server's request m; after, if set,
// runs once it left the queue or was dropped.
func (t *stdioTransport) answer(m jsonrpc.Message, b []byte, after func()) {
	if err := t.w.post(b, true, after); err != nil {
		t.stats.serverDropped.Add(1)
		t.opts.Logger.Debug("dropped the answer to the server's request", "method", m.Method, "err", err)
		if after != nil {
			after()
		}
	}
}

// lost ends every call in flight once the server's output ends.
func (t *stdioTransport) lost() {
	t.calls.lose()
	t.goneOnce.Do(func() { close(t.gone) })
}

func (t *stdioTransport) done() <-chan struct{} { return t.gone }

// close ends the child the way MCP's stdio transport says: stdin closed,
// then SIGTERM, then SIGKILL, grace apart — to its whole process group,
// so that what it started (the node process under npx) ends with it. A
// group that outlives its leader (a child the server left running) gets
// the same two signals once the leader has exited.
//
// What is queued (a cancellation) is written first, but within the same
// first grace period: a server that does not read its stdin gets no
// longer for it.
func (t *stdioTransport) close(grace time.Duration) error {
	defer t.goneOnce.Do(func() { close(t.gone) }) // over the caller's streams the reader may read on
	t.stop()
	deadline := time.Now().Add(grace)
	if !t.w.close(deadline) {
		t.opts.Logger.Warn("the server did not read what the client wrote; closing its stdin anyway")
	}
	err := t.in.Close()
	if t.cmd == nil {
		return err // Connect: the streams are the caller's
	}
	done := make(chan error, 1)
	go func() { done <- t.cmd.Wait() }()
	exited := false
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		wait := grace
		if i == 0 {
			wait = max(0, time.Until(deadline))
		}
		timer := time.NewTimer(wait)
		select {
		case err = <-done:
			timer.Stop()
			exited = true
		case <-timer.C:
			t.opts.Logger.Warn("the server did not exit; signalling it and what it started", "signal", sig.String())
			signalGroup(t.cmd, sig)
			continue
		}
		break
	}
	if !exited {
		err = <-done
	}
	t.endGroup(grace)
	return exitError(err)
}

// endGroup stops what is left of the server's process group after its
// leader exited: SIGTERM, then SIGKILL grace later if any remains.
func (t *stdioTransport) endGroup(grace time.Duration) {
	if !groupAlive(t.cmd) {
		return
	}
	t.opts.Logger.Warn("the server exited and left processes running; stopping them")
	signalGroup(t.cmd, syscall.SIGTERM)
	end := time.Now().Add(grace)
	for groupAlive(t.cmd) && time.Now().Before(end) {
		time.Sleep(10 * time.Millisecond) // a group has no wait: poll it, within grace
	}
	if groupAlive(t.cmd) {
		signalGroup(t.cmd, syscall.SIGKILL)
	}
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

// Package stdio serves MCP over a pair of byte streams — normally the
// process's stdin and stdout — as newline-delimited JSON-RPC: one message
// per line, nothing but protocol on the output stream (logs belong on
// stderr), and writes that never interleave.
//
// A connection serves both protocol eras. On stdio a client cancels a
// request with notifications/cancelled; when the input stream ends, every
// request still in flight is cancelled (not abandoned) and Serve returns
// promptly.
package stdio

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/server/conn"
	"github.com/mcprel/mcprel/server/outbound"
)

// DefaultCloseGrace is how long Serve waits, after the connection ends,
// for cancelled handlers to return before giving up on them.
const DefaultCloseGrace = 5 * time.Second

// DefaultWriteTimeout bounds one write to the output stream.
const DefaultWriteTimeout = 30 * time.Second

// Options configure a Conn. The zero value is valid; each field says what
// zero means. Negative values are errors (Serve returns one), never
// "unlimited" or the default, as in server.Options.
type Options struct {
	// MaxMessageBytes caps one inbound message. A longer line is discarded
	// and answered with an Invalid Request error (with its id when the id
	// could be read). Zero means jsonrpc.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// CloseGrace bounds the wait for cancelled handlers when the connection
	// ends. Zero means DefaultCloseGrace.
	CloseGrace time.Duration
	// Tenant is who the connection's requests are for (see
	// server.WithTenant); "" for a single-tenant process.
	Tenant string
	// WriteTimeout bounds each write to the output: a client that stops
	// reading ends the connection after it (every request in flight is
	// cancelled with server.ErrSlowConsumer) instead of pinning the server
	// forever. Zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
}

// Conn is one MCP connection over a reader and a writer.
type Conn struct {
	srv   *server.Server
	in    io.Reader
	w     io.Writer
	opts  Options
	sess  conn.Session
	queue *outbound.Queue

	stopOnce sync.Once
	stop     chan error // receives the reason Serve must end early
	invalid  error      // what is wrong with the options, which Serve returns

	// Reading: one goroutine at a time owns the reader (see readLoop).
	br       *bufio.Reader
	readCtx  context.Context
	readDone chan error // the read loop's end, from whichever goroutine reads then
	inflight activity   // requests being handled by reading goroutines

	// Writing: the writer goroutine, or the reader after a call it ran
	// itself, writes what is queued, under wmu (see writeQueued).
	wmu       sync.Mutex
	bw        *bufio.Writer
	werr      error         // the write that failed; guarded by wmu
	writeFail chan struct{} // closed when a write fails
	failOnce  sync.Once
	stalled   chan struct{} // receives when a write outlasts WriteTimeout
	watchdog  *time.Timer
}

// inlineBudget is how long the reading goroutine runs a call itself before
// another goroutine takes over reading. Most calls end well within it, and
// then no goroutine had to be woken to run the call; a longer one holds up
// reading (later requests, cancellations) for no more than this.
const inlineBudget = 100 * time.Microsecond

// NewConn returns a connection that reads requests from in and writes
// messages to out. opts may be nil.
func NewConn(srv *server.Server, in io.Reader, out io.Writer, opts *Options) *Conn {
	c := &Conn{srv: srv, in: in, w: out, stop: make(chan error, 1)}
	if opts != nil {
		c.opts = *opts
	}
	if o := c.opts; o.MaxMessageBytes < 0 || o.CloseGrace < 0 || o.WriteTimeout < 0 {
		c.invalid = errors.New("stdio: Options values must not be negative")
	}
	c.opts.MaxMessageBytes = cmp.Or(c.opts.MaxMessageBytes, jsonrpc.DefaultMaxMessageBytes)
	c.opts.CloseGrace = cmp.Or(c.opts.CloseGrace, DefaultCloseGrace)
	c.opts.WriteTimeout = cmp.Or(c.opts.WriteTimeout, DefaultWriteTimeout)
	c.sess = srv.NewSession(conn.Stdio())
	c.queue = c.sess.NewQueue()
	c.sess.SetNotifyQueue(c.queue)
	return c
}

// Serve reads and answers messages until the input ends, the output fails,
// ctx ends, or Shutdown (the connection's, or the server's) is called. In every case requests still in flight are
// cancelled and Serve waits (up to Options.CloseGrace) for their handlers to
// return and for what is queued to be written. It returns nil when the
// input ended cleanly.
func (c *Conn) Serve(ctx context.Context) error {
	if c.invalid != nil {
		c.sess.Close(server.ErrConnectionClosed)
		return c.invalid
	}
	connCtx, cancel := context.WithCancelCause(server.WithTenant(ctx, c.opts.Tenant))
	defer cancel(nil)

	readDone := make(chan error, 1)
	c.br, c.readCtx, c.readDone = bufio.NewReaderSize(c.in, 64<<10), connCtx, readDone
	c.prepareWriting()
	defer c.watchdog.Stop()
	go c.read()
	writeDone := make(chan error, 1)
	go func() { writeDone <- c.writeLoop(connCtx) }()

	var result, cause error
	writerDone := false
	select {
	case err := <-readDone:
		cause = server.ErrConnectionClosed
		if err != nil && !errors.Is(err, io.EOF) {
			result = fmt.Errorf("stdio: reading: %w", err)
		}
	case err := <-writeDone:
		writerDone = true
		cause = server.ErrConnectionClosed
		if errors.Is(err, server.ErrSlowConsumer) {
			cause = err
			c.srv.ReportEvent(server.Event{Kind: server.EventSlowConsumer, Transport: "stdio"})
		}
		result = fmt.Errorf("stdio: writing: %w", err)
	case err := <-c.stop:
		cause = err
	case <-c.srv.Stopped():
		cause = server.ErrShutdown
	case <-ctx.Done():
		cause, result = context.Cause(ctx), ctx.Err()
	}

	c.sess.Close(cause)
	grace, cancelGrace := context.WithTimeout(context.WithoutCancel(ctx), c.opts.CloseGrace)
	defer cancelGrace()
	if err := c.sess.Wait(grace); err != nil {
		c.srvLog("handlers did not return within the close grace; abandoning them", "grace", c.opts.CloseGrace)
	}
	// A request a former reader is still finishing (one it ran itself
	// past the handoff) logs and records its end there.
	c.inflight.wait(grace)
	c.queue.Close()
	if !writerDone {
		select {
		case <-writeDone:
		case <-grace.Done():
		}
	}
	cancel(cause)
	return result
}

// Shutdown ends the connection gracefully: new requests are refused as
// unavailable, subscriptions are ended with notifications/cancelled, and
// running calls may finish until ctx ends, after which they are cancelled.
// Serve then returns.
func (c *Conn) Shutdown(ctx context.Context) error {
	err := c.sess.Shutdown(ctx)
	c.stopOnce.Do(func() { c.stop <- server.ErrShutdown })
	return err
}

func (c *Conn) srvLog(msg string, args ...any) {
	c.srv.Logger().Warn(msg, args...)
}

// activity counts what is in progress and lets Serve wait for none.
type activity struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to zero
}

func (a *activity) start() {
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
}

func (a *activity) done() {
	a.mu.Lock()
	a.n--
	if a.n == 0 && a.idle != nil {
		close(a.idle)
		a.idle = nil
	}
	a.mu.Unlock()
}

// wait returns when nothing is in progress, or when ctx ends.
func (a *activity) wait(ctx context.Context) {
	a.mu.Lock()
	if a.n == 0 {
		a.mu.Unlock()
		return
	}
	if a.idle == nil {
		a.idle = make(chan struct{})
	}
	idle := a.idle
	a.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
}

// readerTurn is one reading goroutine's own state.
type readerTurn struct {
	c       *Conn
	handoff *time.Timer // for the call it runs now, if it runs one
	held    int         // holds on the outbound queue of calls it ran, not yet flushed
}

// begin is called as a call starts on the reading goroutine
// (conn.Prepared.Begin): what it queues waits for this goroutine to write
// it (Hold), unless the call outlasts inlineBudget; then handOff releases
// it to the writer and starts a new reader. A timer of its own for each
// call: once it fired, the new reader's timers are none of this
// goroutine's business.
func (t *readerTurn) begin() {
	t.c.queue.Hold()
	t.handoff = time.AfterFunc(inlineBudget, t.c.handOff)
}

// handOff passes reading to a new goroutine: the reader's call outlasted
// inlineBudget. What it queues goes to the writer from now on.
func (c *Conn) handOff() {
	c.queue.Release()
	c.read()
}

// read runs the read loop on this goroutine until reading ends, or until
// another goroutine took it over.
func (c *Conn) read() {
	if handedOff, err := c.readLoop(c.readCtx); !handedOff {
		c.readDone <- err
	}
}

// readLoop reads and handles frames. A request is run on this goroutine
// when the server admits it at once (conn.Prepared.RunHere): a call that
// ends within inlineBudget costs no other goroutine. One that does not is
// left running here while the handoff timer starts a new reading
// goroutine (read); this one then returns, handedOff, when its call does.
func (c *Conn) readLoop(ctx context.Context) (handedOff bool, err error) {
	br := c.br
	turn := &readerTurn{c: c}
	begin := turn.begin
	for {
		frame, oversize, err := readFrame(br, c.opts.MaxMessageBytes)
		if oversize != nil {
			// Answered with its id, unless it is a notification (never
			// answered) or a response; a frame with none of the members
			// that tell gets an answer without an id.
			id, _ := oversize.ID()
			m := jsonrpc.Message{Kind: cmp.Or(oversize.Kind(), jsonrpc.KindRequest), ID: id}
			c.sess.Reject(ctx, m, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
				"message exceeds the %d-byte limit", c.opts.MaxMessageBytes), c.queue)
		} else if len(bytes.TrimSpace(frame)) > 0 {
			m, derr := jsonrpc.Decode(frame)
			switch {
			case derr != nil:
				c.sess.Reject(ctx, m, derr, c.queue)
			case m.Kind == jsonrpc.KindRequest:
				turn.handoff = nil
				c.inflight.start()
				// The connection's context ends only as Serve closes the
				// session, which cancels every request in flight.
				c.sess.HandleRequest(ctx, m, conn.Prepared{RunHere: true, Begin: begin, SessionCtx: true}, c.queue)
				c.inflight.done()
				if turn.handoff != nil {
					if !turn.handoff.Stop() {
						// Another goroutine reads now; what this one read
						// last (err) is the new reader's to see again.
						turn.flush()
						return true, nil
					}
					turn.held++
					// Answers are written when no whole request is waiting
					// to be read (a burst costs one write, as the input
					// came), and at least every batchCalls calls.
					if turn.held >= batchCalls || !lineBuffered(br) {
						turn.flush()
					}
				} else if !lineBuffered(br) {
					// The request went to a goroutine of its own (a call
					// that waits on something else), or was answered
					// here. Reading on blocks this goroutine's thread in
					// the read, and the call would wait for another
					// thread to be woken to run it: let it run first.
					runtime.Gosched()
				}
			default:
				c.sess.Handle(ctx, m, c.queue)
			}
		}
		if turn.held > 0 && !lineBuffered(br) {
			turn.flush() // about to wait for input: nothing may wait on us
		}
		if err != nil {
			return false, err
		}
		if ctx.Err() != nil {
			return false, nil
		}
	}
}

// batchCalls bounds how many answers of calls the reader ran itself wait
// for one write.
const batchCalls = 32

// lineBuffered reports whether a whole line is already buffered: reading
// it will not wait.
func lineBuffered(br *bufio.Reader) bool {
	buf, _ := br.Peek(br.Buffered())
	return bytes.IndexByte(buf, '\n') >= 0
}

// flush writes what is queued, unless the writer is at it, and ends this
// goroutine's holds on the outbound queue (Release wakes the writer for what is
// left).
func (t *readerTurn) flush() {
	if t.c.wmu.TryLock() {
		t.c.writeQueuedLocked()
		t.c.wmu.Unlock()
	}
	for ; t.held > 0; t.held-- {
		t.c.queue.Release()
	}
}

// readFrame reads one line. A line longer than limit is consumed without
// being kept; the returned scanner holds what could be read of its id.
func readFrame(br *bufio.Reader, limit int) ([]byte, *jsonrpc.IDScanner, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > limit+1 { // +1: the newline is not part of the message
			var scan jsonrpc.IDScanner
			scan.Write(buf)
			scan.Write(chunk)
			for errors.Is(err, bufio.ErrBufferFull) {
				chunk, err = br.ReadSlice('\n')
				scan.Write(chunk)
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, nil, err
			}
			return nil, &scan, err
		}
		switch {
		case err == nil:
			if buf == nil {
				return bytes.Clone(chunk), nil, nil
			}
			return append(buf, chunk...), nil, nil
		case errors.Is(err, bufio.ErrBufferFull):
			buf = append(buf, chunk...)
		default: // io.EOF or a read error: hand back a final unterminated line
			return append(buf, chunk...), nil, err
		}
	}
}

// prepareWriting sets up the output: a buffered writer behind a watchdog.
// An io.Writer has no deadline of its own, so a write still blocked when
// the watchdog fires makes Serve give up the stream (the blocked goroutine
// is abandoned).
func (c *Conn) prepareWriting() {
	c.stalled = make(chan struct{}, 1)
	c.writeFail = make(chan struct{})
	c.watchdog = time.AfterFunc(time.Hour, func() {
		select {
		case c.stalled <- struct{}{}:
		default:
		}
	})
	c.watchdog.Stop()
	c.bw = bufio.NewWriterSize(&watchedWriter{w: c.w, watchdog: c.watchdog, timeout: c.opts.WriteTimeout}, 64<<10)
}

// writeLoop writes what is queued whenever the outbound queue says there is some,
// until it closes, a write fails or stalls, or ctx ends.
func (c *Conn) writeLoop(ctx context.Context) error {
	errs := make(chan error, 1)
	go func() { errs <- c.drain(ctx) }()
	select {
	case err := <-errs:
		return err
	case <-c.writeFail:
		c.wmu.Lock()
		defer c.wmu.Unlock()
		return c.werr
	case <-c.stalled:
		return server.ErrSlowConsumer
	}
}

// drain writes frames until the outbound queue is closed and empty or a write
// fails.
func (c *Conn) drain(ctx context.Context) error {
	ready := c.queue.Ready()
	for {
		c.wmu.Lock()
		err := c.writeQueuedLocked()
		done := c.queue.Closed() && c.queue.Len() == 0
		c.wmu.Unlock()
		if err != nil || done {
			return err
		}
		select {
		case <-ready:
			// Woken by the first of several calls finishing at once (the
			// answers of a burst, read from an upstream in one read, say):
			// let the others queue theirs before taking what is queued,
			// so that they leave in one write, not one each.
			runtime.Gosched()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// writeQueuedLocked writes every queued frame and flushes once, so a burst
// of responses costs one write and a lone response is not held back.
// Frames are taken from the outbound queue under wmu, so whoever writes keeps
// their order.
func (c *Conn) writeQueuedLocked() error {
	if c.werr != nil {
		return c.werr
	}
	wrote := false
	for {
		f, ok := c.queue.TryNext()
		if !ok {
			break
		}
		c.bw.Write(f.Data)
		c.bw.WriteByte('\n')
		wrote = true
	}
	if wrote {
		if err := c.bw.Flush(); err != nil {
			c.werr = err
			c.failOnce.Do(func() { close(c.writeFail) })
			return err
		}
	}
	return nil
}

// watchedWriter arms the watchdog around every write.
type watchedWriter struct {
	w        io.Writer
	watchdog *time.Timer
	timeout  time.Duration
}

func (w *watchedWriter) Write(p []byte) (int, error) {
	w.watchdog.Reset(w.timeout)
	n, err := w.w.Write(p)
	w.watchdog.Stop()
	return n, err
}

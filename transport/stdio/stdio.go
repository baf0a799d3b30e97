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
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/server"
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
	srv    *server.Server
	in     io.Reader
	w      io.Writer
	opts   Options
	sess   *server.Session
	outbox *server.Outbox

	stopOnce sync.Once
	stop     chan error // receives the reason Serve must end early
	invalid  error      // what is wrong with the options, which Serve returns
}

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
	c.sess = srv.NewSession(server.StdioSession())
	c.outbox = srv.NewOutbox()
	c.sess.SetNotifyOutbox(c.outbox)
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
	go func() { readDone <- c.readLoop(connCtx) }()
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
	c.outbox.Close()
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

func (c *Conn) readLoop(ctx context.Context) error {
	br := bufio.NewReaderSize(c.in, 64<<10)
	for {
		frame, oversize, err := readFrame(br, c.opts.MaxMessageBytes)
		if oversize != nil {
			// Answered with its id, unless it is a notification (never
			// answered) or a response; a frame with none of the members
			// that tell gets an answer without an id.
			id, _ := oversize.ID()
			m := jsonrpc.Message{Kind: cmp.Or(oversize.Kind(), jsonrpc.KindRequest), ID: id}
			c.sess.Reject(ctx, m, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
				"message exceeds the %d-byte limit", c.opts.MaxMessageBytes), c.outbox)
		} else if len(bytes.TrimSpace(frame)) > 0 {
			m, derr := jsonrpc.Decode(frame)
			if derr != nil {
				c.sess.Reject(ctx, m, derr, c.outbox)
			} else {
				c.sess.Handle(ctx, m, c.outbox)
			}
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
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

func (c *Conn) writeLoop(ctx context.Context) error {
	// Writes go through a watchdog: an io.Writer has no deadline of its
	// own, so a write still blocked when the timer fires makes the loop
	// give up the stream (the blocked goroutine is abandoned).
	stalled := make(chan struct{}, 1)
	watchdog := time.AfterFunc(time.Hour, func() { stalled <- struct{}{} })
	watchdog.Stop()
	defer watchdog.Stop()
	w := &watchedWriter{w: c.w, watchdog: watchdog, timeout: c.opts.WriteTimeout}
	bw := bufio.NewWriterSize(w, 64<<10)
	errs := make(chan error, 1)
	go func() { errs <- c.drain(ctx, bw) }()
	select {
	case err := <-errs:
		return err
	case <-stalled:
		return server.ErrSlowConsumer
	}
}

// drain writes frames until the outbox closes or a write fails.
func (c *Conn) drain(ctx context.Context, bw *bufio.Writer) error {
	for {
		f, err := c.outbox.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return bw.Flush()
			}
			return err
		}
		bw.Write(f.Data)
		bw.WriteByte('\n')
		// Flush when nothing else is waiting, so a burst of responses costs
		// one write and a lone response is not held back.
		if c.outbox.Len() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
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

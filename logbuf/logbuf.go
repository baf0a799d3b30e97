// Package logbuf makes a log line cheap to write: a Writer holds lines in
// memory and writes them to the file or pipe beneath in batches, so a
// request's log line costs a copy rather than a system call and a wake-up
// of whoever reads the pipe.
//
// A line is late by at most Options.Interval, never lost on a clean exit:
// Close writes what is held, and a Writer bounds what it holds (a writer
// that would exceed Options.Size waits for the batch to be written
// instead of dropping lines; with a batch being written and the next
// filling, it holds at most twice Size). On a crash — SIGKILL, a panic
// outside the goroutine that would flush — the lines of the last
// Interval, at most twice Size bytes, are lost. Handler writes a warning
// or an error at once, with what was held before it, so warnings and
// errors are not among them; the info lines just before a crash may be.
// A writer beneath that is slow delays lines past Interval too: a batch
// waits for the one before it.
//
// It is for any io.Writer beneath a log/slog handler:
//
//	logs := logbuf.New(os.Stderr, nil)
//	defer logs.Close()
//	logger := slog.New(logbuf.Handler(slog.NewTextHandler(logs, nil), logs))
//
// NewTextHandler writes what slog's text handler writes, in under half
// the time for a line of flat attributes (a request's log line):
//
//	logger := slog.New(logbuf.Handler(logbuf.NewTextHandler(logs, nil), logs))
package logbuf

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Options tunes a Writer. The zero value is the default.
type Options struct {
	// Size bounds the bytes waiting to be written: a write that would
	// pass it waits until they have been. With a batch being written and
	// the next one filling, up to twice Size is held. 0 means 64 KiB.
	Size int
	// Interval bounds how late a line is written. 0 means 50 ms.
	Interval time.Duration
}

// Writer is a batching io.Writer, safe for concurrent use. Each Write is
// written whole, and one goroutine's Writes in the order it made them.
// (Between goroutines, a Write longer than Size, written through, may
// overtake a shorter one that returned first.)
type Writer struct {
	w        io.Writer
	size     int
	interval time.Duration

	// writing is held while a batch is written to w, so that batches
	// reach it in order and one buffer is always free to fill.
	writing sync.Mutex

	mu     sync.Mutex
	buf    []byte // what is held, at most size bytes
	spare  []byte // the other buffer, nil while its batch is being written
	timer  *time.Timer
	armed  bool // the timer will flush buf
	closed bool
	err    error // the first error w returned
}

// New returns a Writer that batches writes to w. opts may be nil.
func New(w io.Writer, opts *Options) *Writer {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Size <= 0 {
		o.Size = 64 << 10
	}
	if o.Interval <= 0 {
		o.Interval = 50 * time.Millisecond
	}
	return &Writer{w: w, size: o.Size, interval: o.Interval,
		buf: make([]byte, 0, o.Size), spare: make([]byte, 0, o.Size)}
}

// Write holds p to be written with the next batch and returns at once,
// unless what is held would pass Options.Size: then it first waits for
// that to be written. A p larger than Size, or any p after Close, is
// written through, and a failure of that write returned. A failure of a
// batch is reported by Flush and Close: a held line has no one to tell.
func (b *Writer) Write(p []byte) (int, error) {
	b.mu.Lock()
	for !b.closed && len(b.buf) > 0 && len(b.buf)+len(p) > b.size {
		b.mu.Unlock()
		b.Flush()
		b.mu.Lock()
	}
	if b.closed || len(p) > b.size {
		b.mu.Unlock()
		b.writing.Lock()
		defer b.writing.Unlock()
		n, err := b.w.Write(p)
		if err != nil {
			b.mu.Lock()
			b.err = cmp.Or(b.err, err)
			b.mu.Unlock()
		}
		return n, err
	}
	b.buf = append(b.buf, p...)
	if !b.armed {
		b.armed = true
		if b.timer == nil {
			b.timer = time.AfterFunc(b.interval, func() { b.Flush() })
		} else {
			b.timer.Reset(b.interval)
		}
	}
	b.mu.Unlock()
	return len(p), nil
}

// Flush writes what is held and returns the first error the writer
// beneath has returned, if any.
func (b *Writer) Flush() error {
	b.writing.Lock()
	defer b.writing.Unlock()
	return b.flushWriting()
}

// flushWriting is Flush, with b.writing held.
func (b *Writer) flushWriting() error {
	b.mu.Lock()
	batch := b.buf
	b.buf, b.spare = b.spare, nil
	b.armed = false
	b.mu.Unlock()
	var err error
	if len(batch) > 0 {
		_, err = b.w.Write(batch)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spare = batch[:0]
	b.err = cmp.Or(b.err, err)
	return b.err
}

// Close writes what is held; later writes go straight through, so a
// goroutine that logs after Close loses nothing either. It does not close
// the writer beneath.
func (b *Writer) Close() error {
	// Closed and flushed as one step: a write that finds the Writer
	// closed waits for what was held to be written, and follows it.
	b.writing.Lock()
	defer b.writing.Unlock()
	b.mu.Lock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	return b.flushWriting()
}

// Handler returns h, whose records at slog.LevelWarn and above are written
// at once: the Writer beneath h is flushed after each. A warning is rare
// and the line an operator looks for when something went wrong; it should
// not wait for a batch, nor be lost with one.
func Handler(h slog.Handler, w *Writer) slog.Handler {
	return flushing{h, w}
}

type flushing struct {
	slog.Handler
	w *Writer
}

func (f flushing) Handle(ctx context.Context, r slog.Record) error {
	err := f.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		f.w.Flush()
	}
	return err
}

// attrsHandler is a handler that takes a record's parts without the
// record (NewTextHandler's).
type attrsHandler interface {
	HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error
}

// HandleAttrs is the handler's HandleAttrs (NewTextHandler's), or Handle
// of the record those make.
func (f flushing) HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error {
	var err error
	if h, ok := f.Handler.(attrsHandler); ok {
		err = h.HandleAttrs(ctx, t, level, msg, attrs)
	} else {
		err = f.Handler.Handle(ctx, recordOf(t, level, msg, attrs))
	}
	if level >= slog.LevelWarn {
		f.w.Flush()
	}
	return err
}

func (f flushing) WithAttrs(attrs []slog.Attr) slog.Handler {
	return flushing{f.Handler.WithAttrs(attrs), f.w}
}

func (f flushing) WithGroup(name string) slog.Handler {
	return flushing{f.Handler.WithGroup(name), f.w}
}

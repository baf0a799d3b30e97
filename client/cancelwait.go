package client

import (
	"context"
	"fmt"
	"sync"
)

// cancelWrites follows the cancellations the client queued without
// waiting for them (CancelQueued: a notifications/cancelled on stdio, over
// 2025 Streamable HTTP and HTTP+SSE) until each was written or failed, for
// WaitCancellations. A call never waits for its own: a server that stops
// reading must not hold the caller who gives up on it.
type cancelWrites struct {
	mu      sync.Mutex
	pending int
	failed  int
	err     error         // the last failure
	settled chan struct{} // closed when pending drops to 0; nil while none is pending
}

// add counts a cancellation queued; done must follow it once.
func (w *cancelWrites) add() {
	w.mu.Lock()
	if w.pending == 0 {
		w.settled = make(chan struct{})
	}
	w.pending++
	w.mu.Unlock()
}

// done counts a queued cancellation written (err nil) or failed.
func (w *cancelWrites) done(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failed++
		w.err = err
	}
	if w.pending--; w.pending == 0 {
		close(w.settled)
		w.settled = nil
	}
}

// WaitCancellations waits until every cancellation the client queued
// without waiting (a notifications/cancelled on stdio, over 2025
// Streamable HTTP and HTTP+SSE: the calls whose errors say CancelQueued)
// has been written — on stdio to the server's stdin, over HTTP POSTed and
// acknowledged — or has failed, or until ctx ends. It returns nil when
// each was written, an error that says how many could not be when one
// failed (since the client was made), and ctx's cause when some are still
// on their way. A program about to exit calls it, bounded, so that the
// server is told before the process ends; Close does not wait for them
// over HTTP.
func (c *Client) WaitCancellations(ctx context.Context) error {
	w := &c.stats.cancels
	w.mu.Lock()
	settled := w.settled
	w.mu.Unlock()
	if settled != nil {
		select {
		case <-settled:
		case <-ctx.Done():
			w.mu.Lock()
			pending := w.pending
			w.mu.Unlock()
			return fmt.Errorf("client: %d cancellation(s) still on their way to the server: %w", pending, context.Cause(ctx))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed > 0 {
		return fmt.Errorf("client: %d cancellation(s) could not be sent to the server: %w", w.failed, w.err)
	}
	return nil
}

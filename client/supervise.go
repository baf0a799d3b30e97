package client

import (
	"cmp"
	"context"
	"time"

	"github.com/mcprel/mcprel/retry"
)

// Supervision keeps a stdio server, or an HTTP+SSE stream, connected
// without waiting for a call: when the process dies or the stream ends,
// the client connects again, after a capped, jittered pause that grows
// with consecutive failures (a reconnection that fails, or a connection
// that died before it had lived Healthy: a crash loop), until Close. A
// call made while it is down fails at once with a *NotSentError: it never
// left, and whether to make it again is its caller's (or its retries').
//
// A gateway in front of a server, or any long-lived client, supervises
// its connection so that it is up before the next call needs it, and
// lists again after each reconnection (OnUp): what changed while it was
// down was never announced.
type Supervision struct {
	// Backoff spaces the reconnections; its zero value is
	// retry.Backoff's defaults.
	Backoff retry.Backoff
	// Healthy is how long a connection must have lived for its death to
	// start the failures over; zero means Backoff.Cap (or a minute when
	// that is zero).
	Healthy time.Duration
	// OnDown is told, on the supervisor's goroutine, that the connection
	// died (err nil) or that a reconnection failed (err), with the
	// failures in a row so far and the pause before the next try.
	OnDown func(failures int, next time.Duration, err error)
	// ConnectTimeout bounds one reconnection, the handshake included;
	// zero means DefaultSupervisedConnect.
	ConnectTimeout time.Duration
	// OnUp is called on the supervisor's goroutine after each
	// reconnection, for what the caller must do again on a new
	// connection (list, listen). Its context ends at Close.
	OnUp func(ctx context.Context)
}

// DefaultSupervisedConnect bounds one supervised reconnection.
const DefaultSupervisedConnect = 30 * time.Second

// superviseIf starts the supervisor when s is set.
func (c *Client) superviseIf(s *Supervision) {
	if s == nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	c.stopSupervising = stop
	go c.supervise(ctx, *s)
}

// supervise restarts the connection each time it ends, until ctx ends.
func (c *Client) supervise(ctx context.Context, s Supervision) {
	healthy := cmp.Or(s.Healthy, s.Backoff.Cap, time.Minute)
	failures := 0
	for {
		t := c.transport()
		up := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-t.done():
		}
		if ctx.Err() != nil {
			return // closed, not dead
		}
		if time.Since(up) >= healthy {
			failures = 0 // it had recovered: a new failure, not a crash loop's next
		}
		var err error // nil: it died
		for {
			pause := s.Backoff.Delay(failures, 0)
			failures++
			if s.OnDown != nil {
				s.OnDown(failures, pause, err)
			}
			if !retry.Wait(ctx, pause) {
				return
			}
			t = c.transport() // a restart that failed its handshake left a new one
			actx, cancel := context.WithTimeout(ctx, cmp.Or(s.ConnectTimeout, DefaultSupervisedConnect))
			_, err = c.restart(actx, t)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
		}
		if s.OnUp != nil {
			s.OnUp(ctx)
		}
	}
}

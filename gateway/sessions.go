package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// tenantSession is an upstream's session for one tenant — a 2025-era
// HTTP (or SSE) session, or the process of a stdio upstream run per
// tenant: server-initiated requests, subscriptions and logging levels
// belong to a session, so tenants never share one.
type tenantSession struct {
	c        *client.Client
	ready    chan struct{} // closed once dialled (c set) or failed (err set)
	err      error
	inflight int
	lastUsed time.Time
}

// session returns tenant's upstream session, dialling it on first use:
// it declares caps, what the gateway may relay to the downstream client
// whose call opened it.
// At Options.MaxSessions the least recently used idle session is closed
// to make room; when none is idle the call is refused, retryably.
func (l *link) session(ctx context.Context, tenant string, caps mcp.ClientCapabilities) (*client.Client, func(), error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, &errUnavailable{after: time.Second, why: "the gateway is closing"}
	}
	s := l.sessions[tenant]
	if s != nil && s.c != nil && isDone(s.c) && s.inflight == 0 {
		// Its process died, or its stream ended: a new one.
		delete(l.sessions, tenant)
		l.closeLater(s.c)
		s = nil
	}
	if s == nil {
		if len(l.sessions) >= l.g.opts.MaxSessions && !l.evictLocked() {
			l.mu.Unlock()
			return nil, nil, &errUnavailable{after: time.Second,
				why: fmt.Sprintf("upstream %q holds %d sessions, all busy (gateway MaxSessions)", l.up.Name, l.g.opts.MaxSessions)}
		}
		s = &tenantSession{ready: make(chan struct{})}
		l.sessions[tenant] = s
		l.closing.Add(1)
		go l.dialSession(tenant, s, caps)
	}
	s.inflight++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		s.inflight--
		s.lastUsed = time.Now()
		l.mu.Unlock()
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		release()
		return nil, nil, context.Cause(ctx)
	}
	if s.err != nil {
		release()
		return nil, nil, s.err
	}
	return s.c, release, nil
}

// dialSession dials tenant's session s for every call that waits for
// it, so under none of their contexts: the first one's cancellation
// would fail them all. Close waits for it (closing).
func (l *link) dialSession(tenant string, s *tenantSession, caps mcp.ClientCapabilities) {
	defer l.closing.Done()
	c, err := l.dial(l.ctx, tenant, caps)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && l.sessions[tenant] != s {
		// The link closed while it dialled: no one else will close it.
		l.mu.Unlock()
		l.closeClient(c)
		l.mu.Lock()
		c, err = nil, &errUnavailable{after: time.Second, why: "the gateway is closing"}
	}
	s.c, s.err = c, err
	if err != nil && l.sessions[tenant] == s {
		delete(l.sessions, tenant) // the next call dials again
	}
	close(s.ready)
}

// evictLocked closes the least recently used idle session.
func (l *link) evictLocked() bool {
	var oldest string
	var found *tenantSession
	for t, s := range l.sessions {
		if s.inflight == 0 && s.c != nil && (found == nil || s.lastUsed.Before(found.lastUsed)) {
			oldest, found = t, s
		}
	}
	if found == nil {
		return false
	}
	delete(l.sessions, oldest)
	l.closeLater(found.c)
	return true
}

// closeIdleSessions closes the sessions unused for Options.SessionIdle.
func (l *link) closeIdleSessions(now time.Time) {
	l.mu.Lock()
	var idle []*client.Client
	for t, s := range l.sessions {
		if s.inflight == 0 && s.c != nil && now.Sub(s.lastUsed) >= l.g.opts.SessionIdle {
			delete(l.sessions, t)
			idle = append(idle, s.c)
		}
	}
	l.mu.Unlock()
	for _, c := range idle {
		l.closeLater(c)
	}
}

// closeLater closes c on a goroutine of its own: a stdio process may take
// a grace period or two to stop, and the link's loop (and the caller's
// lock) must not wait for it. Close waits for every one.
func (l *link) closeLater(c *client.Client) {
	l.closing.Add(1)
	go func() {
		defer l.closing.Done()
		l.closeClient(c)
	}()
}

// isDone reports whether c's connection has ended.
func isDone(c *client.Client) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

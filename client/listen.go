package client

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// ListenOptions say what a subscription listens for and what to do with
// it.
type ListenOptions struct {
	// Filter is what the stream carries (tools/prompts/resources list
	// changes, resource updates). The same filter is asked for again on
	// every reconnection.
	Filter mcp.SubscriptionFilter
	// OnNotification receives each notification of the stream (not its
	// acknowledgement), on the subscription's goroutine.
	OnNotification func(method string, params json.RawMessage)
	// Refetch is called after every reconnection, before new
	// notifications are delivered: whatever changed while the stream was
	// down was not sent, so the caller reads the state it follows again
	// from the authoritative methods (tools/list, resources/read,
	// tasks/get). Never replay a mutation here.
	Refetch func(ctx context.Context)
}

// Subscription is a subscriptions/listen stream (2026-07-28) that the
// client keeps open: when it drops, a new listen request (a new id, the
// same filter) follows after a jittered backoff, then a refetch. There is
// no Last-Event-ID in this era: what was missed is refetched, not
// replayed.
type Subscription struct {
	c          *Client
	o          ListenOptions
	cancel     context.CancelFunc
	done       chan struct{}
	reconnects atomic.Int64

	refetchNow chan struct{} // a result carried the refetch flag

	mu sync.Mutex
	ex *exchange
	id jsonrpc.ID
}

// Listen opens a subscription and returns once the server acknowledged
// it. It needs the 2026-07-28 era: a 2025 server sends its list changes on
// the session's own stream instead.
func (c *Client) Listen(ctx context.Context, o ListenOptions) (*Subscription, error) {
	if c.era != mcp.Modern {
		return nil, errors.New("client: subscriptions/listen is a 2026-07-28 method; this server speaks " + c.version)
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Subscription{c: c, o: o, cancel: cancel, done: make(chan struct{}), refetchNow: make(chan struct{}, 1)}
	c.subsMu.Lock()
	if c.subs == nil {
		c.subs = map[*Subscription]bool{}
	}
	c.subs[s] = true
	c.subsMu.Unlock()
	acked := make(chan error, 1)
	go s.run(lctx, acked)
	select {
	case err := <-acked:
		if err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, context.Cause(ctx)
	}
}

// Reconnects counts the listen requests made after the first.
func (s *Subscription) Reconnects() int { return int(s.reconnects.Load()) }

// Close ends the subscription the transport's way (closing its stream, or
// notifications/cancelled on stdio) and waits for its goroutine.
func (s *Subscription) Close() {
	s.c.subsMu.Lock()
	delete(s.c.subs, s)
	s.c.subsMu.Unlock()
	s.cancel()
	s.mu.Lock()
	ex, id := s.ex, s.id
	s.mu.Unlock()
	if ex != nil {
		ex.cancel(id, "the client closed the subscription")
	}
	<-s.done
}

// run keeps the stream open until ctx ends. acked hears about the first
// acknowledgement, or the first failure.
func (s *Subscription) run(ctx context.Context, acked chan<- error) {
	defer close(s.done)
	first := true
	for attempt := 0; ctx.Err() == nil; attempt++ {
		ok, err := s.once(ctx, first, acked)
		if first && !ok {
			acked <- err
			return
		}
		if ok {
			attempt = 0
		}
		first = false
		if !waitToReconnect(ctx, attempt, 0) {
			return
		}
		s.reconnects.Add(1)
	}
}

// once makes one listen request and follows its stream until it ends. It
// reports whether the server acknowledged it.
func (s *Subscription) once(ctx context.Context, first bool, acked chan<- error) (bool, error) {
	c := s.c
	id := jsonrpc.IntID(c.nextID.Add(1))
	body, err := c.params(mcp.ListenParams{Notifications: &s.o.Filter}, "l"+jsonText(id), nil, false, nil)
	if err != nil {
		return false, err
	}
	notes := make(chan jsonrpc.Message, notesBuffer)
	deliver := func(m jsonrpc.Message) {
		select {
		case notes <- m:
		default:
			c.stats.dropped.Add(1) // a slow OnNotification loses notifications; the next refetch covers them
		}
	}
	ex, err := c.transport().start(ctx, outgoing{id: id, method: mcp.MethodListen, params: body, era: c.era, version: c.version,
		token: "l" + jsonText(id), notes: deliver})
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	s.ex, s.id = ex, id
	s.mu.Unlock()
	defer ex.cancel(id, "the subscription is reconnecting")
	isAcked := false
	for {
		select {
		case <-ctx.Done():
			return isAcked, context.Cause(ctx)
		case <-ex.response:
			r, ok := ex.result()
			// The stream ended: the server closed it or answered the
			// listen request, or the connection dropped.
			if ok && r.m.Error != nil && !isAcked {
				return false, r.m.Error
			}
			if ok && r.err != nil && !isAcked {
				return false, r.err
			}
			if !isAcked {
				return false, ErrConnectionLost
			}
			return true, nil
		case <-s.refetchNow:
			if isAcked && s.o.Refetch != nil {
				s.o.Refetch(ctx)
			}
		case m := <-notes:
			if m.Method == mcp.NotificationSubscriptionAck {
				if !isAcked {
					isAcked = true
					if first {
						acked <- nil
					} else {
						c.stats.reconnects.Add(1)
						if s.o.Refetch != nil {
							s.o.Refetch(ctx)
						}
					}
				}
				continue
			}
			if s.o.OnNotification != nil {
				s.o.OnNotification(m.Method, m.Params)
			}
		}
	}
}

func jsonText(id jsonrpc.ID) string { return string(id.AppendJSON(nil)) }

// subscriptionOf reads the listen request a notification belongs to.
func subscriptionOf(params json.RawMessage) (jsonrpc.ID, bool) {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return jsonrpc.ID{}, false
	}
	raw, ok := p.Meta[mcp.MetaSubscriptionID]
	if !ok {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.ParseID(raw)
	return id, err == nil
}

// reconnectBackoff spaces the reconnections of streams (a listen stream,
// a 2025 session's stream, a stream resumed where the server gave no
// retry delay): full jitter on 250 ms doubling to 8 s, then steady at the
// cap, so that many clients that lost the same server neither come back
// in step nor crowd the first moments after it returns (herdbench).
var reconnectBackoff = retry.Backoff{Steady: true}

// waitToReconnect waits before the attempt-th reconnection of a stream:
// the server's SSE retry delay when it gave one, else reconnectBackoff's.
// It reports false, at once, when ctx ends first.
func waitToReconnect(ctx context.Context, attempt int, serverRetry time.Duration) bool {
	wait := serverRetry
	if wait == 0 {
		wait = reconnectBackoff.Delay(attempt, 0)
	}
	return retry.Wait(ctx, wait)
}

package server

import (
	"encoding/json"
	"slices"
	"sync"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/outbound"
)

// subscription is the state of one subscriptions/listen stream: the filter
// the server agreed to honour, and its place in the server's count of
// listens, given back exactly once when the stream ends (or never opens).
type subscription struct {
	filter  mcp.SubscriptionFilter
	release sync.Once
	tenant  string
	srv     *Server

	// Guarded by the listen request's mu: notifications that came after
	// the stream was registered but before its acknowledgement went out,
	// which must go first.
	acked   bool
	pending [][]byte
}

// maxPendingNotifications bounds the notifications held for a listen
// stream until its acknowledgement is sent; past it they are dropped,
// like any notification a stream cannot take.
const maxPendingNotifications = 16

// end gives the subscription's place back; later calls do nothing.
func (s *subscription) end() {
	s.release.Do(func() { s.srv.closeListen(s.tenant) })
}

// listen opens a subscriptions/listen stream (modern era). The
// acknowledgement goes first, then only the notification kinds requested
// and honoured, each tagged with the listen request's id. The stream lasts
// until the client cancels it (closing the HTTP stream, or
// notifications/cancelled on stdio) or the server ends it.
func (ss *session) listen(r *inflight, in *incoming) {
	var p mcp.ListenParams
	if !decodeInto(r, in.params, &p) {
		return
	}
	if p.Notifications == nil {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.notifications is required"))
		return
	}
	r.tenant = TenantFrom(in.ctx)
	if e := ss.srv.openListen(r.tenant); e != nil {
		r.fail(e)
		return
	}
	// Only what the server can deliver is honoured and acknowledged.
	caps := ss.srv.capabilities(mcp.Modern)
	want := p.Notifications
	sub := &subscription{tenant: r.tenant, srv: ss.srv, filter: mcp.SubscriptionFilter{
		ToolsListChanged:     want.ToolsListChanged,
		PromptsListChanged:   want.PromptsListChanged && caps.Prompts != nil,
		ResourcesListChanged: want.ResourcesListChanged && caps.Resources != nil,
	}}
	if caps.Resources != nil && len(want.ResourceSubscriptions) > 0 {
		sub.filter.ResourceSubscriptions = slices.Clone(want.ResourceSubscriptions)
	}

	// The request holds one reservation (for its ending); the
	// acknowledgement needs a second one.
	if r.out.Reserve(in.ctx) != nil {
		r.out.Unreserve()
		sub.end()
		return
	}
	ack, err := json.Marshal(mcp.SubscriptionAckParams{Meta: mcp.SubscriptionMeta(r.id), Notifications: sub.filter})
	if err != nil {
		r.out.Unreserve()
		sub.end()
		r.fail(jsonrpc.NewError(jsonrpc.CodeInternalError, "internal error: %v", err))
		return
	}
	// Registered before the acknowledgement goes out, so that nothing
	// after it is missed; what comes in between waits for it. From here
	// the stream's end gives the count back (forget); a stream that could
	// not even be tracked gives it back now.
	r.sub = sub
	if !ss.track(in.ctx, r, in.sessionDone) {
		r.out.Unreserve() // the acknowledgement's
		sub.end()
		return
	}
	if h := ss.srv.testHooks.listenTracked; h != nil {
		h()
	}
	r.mu.Lock()
	if r.outcome != 0 { // ended meanwhile
		r.mu.Unlock()
		r.out.Unreserve()
		return
	}
	err = r.out.PushReserved(outbound.Essential, r, jsonrpc.AppendNotification(nil, mcp.NotificationSubscriptionAck, ack))
	if err == nil {
		sub.acked = true
		for _, n := range sub.pending {
			r.out.PushDroppable(r, n)
		}
		sub.pending = nil
	}
	r.mu.Unlock()
	if err != nil {
		r.out.Unreserve()
		r.abort(ErrConnectionClosed)
	}
}

// openListen counts a new listen stream of tenant, or says why not.
func (s *Server) openListen(tenant string) *jsonrpc.Error {
	c := &s.listens
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byTenant[tenant] >= s.opts.MaxSubscriptions {
		return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "at most %d subscriptions/listen streams may be open at once for one client; close one first", s.opts.MaxSubscriptions)
	}
	if c.total >= s.opts.MaxSubscriptionsTotal {
		return overloaded(s.opts.OverloadRetryAfter)
	}
	if c.byTenant == nil {
		c.byTenant = map[string]int{}
	}
	c.byTenant[tenant]++
	c.total++
	return nil
}

// closeListen gives back what openListen counted.
func (s *Server) closeListen(tenant string) {
	c := &s.listens
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if c.byTenant[tenant]--; c.byTenant[tenant] <= 0 {
		delete(c.byTenant, tenant)
	}
}

// notifySubscription sends a notification on an open subscription, tagged
// with its id. It is dropped, like progress, if the client reads too slowly.
func (r *inflight) notifySubscription(method string, params map[string]any) {
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = mcp.SubscriptionMeta(r.id)
	data, err := json.Marshal(params)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcome != 0 {
		return
	}
	msg := jsonrpc.AppendNotification(nil, method, data)
	if !r.sub.acked {
		if len(r.sub.pending) < maxPendingNotifications {
			r.sub.pending = append(r.sub.pending, msg)
		}
		return
	}
	r.out.PushDroppable(r, msg)
}

// endSubscription ends a subscription from the server side. On a stream of
// its own the listen request gets its result (a graceful end); on a shared
// channel the server sends notifications/cancelled for the listen request,
// the one use the protocol allows a server to make of it.
func (r *inflight) endSubscription(reason string) {
	r.end(ending{outcome: Completed, cause: ErrShutdown, message: func() final {
		if r.sess.cfg.StreamPerRequest {
			res := &mcp.EmptyResult{ResultBase: mcp.ResultBase{Meta: mcp.SubscriptionMeta(r.id)}}
			data, _ := r.encodeResult(res)
			return final{data: data}
		}
		params, _ := json.Marshal(mcp.CancelledParams{RequestID: r.id, Reason: reason})
		return final{data: jsonrpc.AppendNotification(nil, mcp.NotificationCancelled, params), kind: outbound.Essential}
	}})
}

var listMethods = [...]string{
	kindTools:     mcp.NotificationToolsListChanged,
	kindResources: mcp.NotificationResourcesChanged,
	kindPrompts:   mcp.NotificationPromptsChanged,
}

// notifyListChanged tells this session's clients that a list changed:
// modern subscribers that asked for it on their listen streams, and an
// initialized legacy client on the session's notification stream.
func (ss *session) notifyListChanged(k listKind) {
	ss.mu.Lock()
	var targets []*inflight
	for r := range ss.subs {
		f := r.sub.filter
		if (k == kindTools && f.ToolsListChanged) || (k == kindResources && f.ResourcesListChanged) || (k == kindPrompts && f.PromptsListChanged) {
			targets = append(targets, r)
		}
	}
	legacy, notify := ss.initialized, ss.notify
	ss.mu.Unlock()
	for _, r := range targets {
		r.notifySubscription(listMethods[k], nil)
	}
	if legacy && notify != nil {
		notify.PushDroppable(ss, jsonrpc.AppendNotification(nil, listMethods[k], nil))
	}
}

func (ss *session) notifyResourceUpdated(uri string) {
	ss.mu.Lock()
	var targets []*inflight
	for r := range ss.subs {
		if slices.Contains(r.sub.filter.ResourceSubscriptions, uri) {
			targets = append(targets, r)
		}
	}
	_, legacy := ss.resourceSubs[uri]
	notify := ss.notify
	ss.mu.Unlock()
	for _, r := range targets {
		r.notifySubscription(mcp.NotificationResourceUpdated, map[string]any{"uri": uri})
	}
	if legacy && notify != nil {
		params, _ := json.Marshal(mcp.ResourceUpdatedParams{URI: uri})
		notify.PushDroppable(ss, jsonrpc.AppendNotification(nil, mcp.NotificationResourceUpdated, params))
	}
}

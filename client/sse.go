package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// DialSSE connects to a server that speaks the HTTP+SSE transport of the
// 2024-11-05 revision, which Streamable HTTP replaced and many deployed
// servers still speak only: a GET of url opens the one stream on which
// the server sends everything, its first event names the endpoint the
// client POSTs every message to.
//
// The endpoint must be on url's origin (scheme, host, port and user):
// one elsewhere is refused, so that Options.Header (credentials) goes
// only where the caller named. The era is always the handshake's
// (initialize, offering the version the 2025 path offers, and accepting
// 2024-11-05 back); Options.Era may be zero or mcp.Legacy only. The
// endpoint must be named within Options.ProbeTimeout of the GET.
//
// The transport has no resumption. When the stream ends, every call in
// flight fails with ErrConnectionLost at once; the next call opens a new
// stream, which is a new session, and runs the handshake again before it
// is sent (counted in Stats.Reconnects). Whether to make a lost call
// again is the retry rules' decision, never the transport's.
func DialSSE(ctx context.Context, url string, opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.fill()
	if o.Era != 0 && o.Era != mcp.Legacy {
		return nil, fmt.Errorf("client: DialSSE speaks only the handshake era, which is all the HTTP+SSE transport has; Options.Era is %v", o.Era)
	}
	o.Era = mcp.Legacy
	base, err := neturl.Parse(url)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("client: DialSSE needs an http or https URL, not %q", url)
	}
	hc := withAuthorizer(withoutRedirects(o.HTTPClient), o.Authorizer)
	stats := &counters{}
	open := func(ctx context.Context) (transport, error) {
		t, err := openSSE(ctx, base, hc, o, stats)
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	t, err := open(ctx)
	if err != nil {
		return nil, err
	}
	c, err := newClient(ctx, t, o, stats)
	if err != nil {
		return nil, err
	}
	c.redial = open
	c.restartOnCall = o.Supervise == nil
	c.superviseIf(o.Supervise)
	return c, nil
}

// sseTransport is one stream of the HTTP+SSE transport, and so one
// session: what the client sends is POSTed to the endpoint the stream
// named, what the server sends arrives on the stream and is routed by id
// and progress token, as on stdio.
type sseTransport struct {
	url      string // the stream's
	endpoint string // where to POST, set once before the transport is used
	hc       *http.Client
	opts     Options
	stats    *counters
	side     sidePosts
	lifetime context.Context    // the stream's and its POSTs'
	stop     context.CancelFunc // ends them
	ended    chan struct{}      // closed when the stream's reader returns
	calls    *inflight          // dead once the stream ended
}

// openSSE GETs the stream and returns once the server named its endpoint,
// within ctx and Options.ProbeTimeout.
func openSSE(ctx context.Context, base *neturl.URL, hc *http.Client, o Options, stats *counters) (*sseTransport, error) {
	t := &sseTransport{url: base.String(), hc: hc, opts: o, stats: stats, ended: make(chan struct{}), calls: newInflight()}
	t.lifetime, t.stop = context.WithCancel(context.Background())
	t.side = newSidePosts(o, stats, t.post)
	hreq, err := http.NewRequestWithContext(t.lifetime, http.MethodGet, t.url, nil)
	if err != nil {
		t.stop()
		return nil, err
	}
	t.header(hreq.Header)
	hreq.Header.Set("Accept", "text/event-stream")
	hreq.Header.Set("Cache-Control", "no-cache")
	opened := make(chan error, 1)
	go t.listen(hreq, base, opened)
	timer := time.NewTimer(o.ProbeTimeout)
	defer timer.Stop()
	select {
	case err = <-opened:
	case <-ctx.Done():
		err = fmt.Errorf("client: opening the event stream of %s: %w", t.url, context.Cause(ctx))
	case <-timer.C:
		err = fmt.Errorf("client: %s named no endpoint (its stream's first event) within %v", t.url, o.ProbeTimeout)
	}
	if err != nil {
		t.stop()
		<-t.ended
		return nil, err
	}
	return t, nil
}

// listen reads the stream until it ends: first the endpoint, reported on
// opened, then the server's messages. When it ends, every call in flight
// is lost.
func (t *sseTransport) listen(hreq *http.Request, base *neturl.URL, opened chan<- error) {
	defer close(t.ended)
	defer t.lost()
	announced := false
	announce := func(err error) {
		if !announced {
			announced = true
			opened <- err
		}
	}
	defer announce(errors.New("client: the event stream ended before it named an endpoint"))
	resp, err := t.hc.Do(hreq)
	if err != nil {
		announce(sendError(t.url, err))
		return
	}
	defer resp.Body.Close()
	if re := redirectOf(resp); re != nil {
		announce(re)
		return
	}
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || media != "text/event-stream" {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		announce(&StatusError{Status: resp.StatusCode, Body: strings.TrimSpace(clip(body)), RetryAfter: resp.Header.Get("Retry-After")})
		return
	}
	var cursor sseCursor // the transport has no resumption: only read
	readSSE(resp.Body, t.opts.MaxMessageBytes, &cursor, func(e sseEvent) bool {
		switch {
		case e.name == "endpoint" && e.tooLarge == nil:
			if announced {
				t.opts.Logger.Warn("the server named its endpoint again; keeping the first", "endpoint", string(e.data))
				return false
			}
			endpoint, err := endpointOf(base, string(e.data))
			if err != nil {
				announce(err)
				return true // the stream is of no use
			}
			t.endpoint = endpoint // before announce: the opener reads it after
			announce(nil)
		case !announced:
			t.opts.Logger.Warn("the server sent an event before naming its endpoint; ignored", "event", e.name)
		case e.tooLarge != nil:
			t.tooLarge(e.tooLarge)
		case e.name == "" || e.name == "message":
			t.dispatch(e.data)
		default:
			t.opts.Logger.Debug("ignored an event of an unknown kind", "event", e.name)
		}
		return false
	})
}

// endpointOf resolves the endpoint event's data against the stream's URL
// and refuses one on another origin: the caller's headers (credentials)
// must never reach a host the caller did not name.
func endpointOf(base *neturl.URL, data string) (string, error) {
	ref, err := neturl.Parse(strings.TrimSpace(data))
	if err != nil {
		return "", fmt.Errorf("client: the server named an endpoint that is not a URL: %q", clip([]byte(data)))
	}
	u := base.ResolveReference(ref)
	if !strings.EqualFold(u.Scheme, base.Scheme) || !strings.EqualFold(u.Hostname(), base.Hostname()) ||
		portOf(u) != portOf(base) || u.User.String() != base.User.String() {
		return "", fmt.Errorf("client: the server named the endpoint %q, which is not on the origin of %s (scheme, host, port and user); refused, so that the client's headers go only where they were meant to", clip([]byte(data)), base.Redacted())
	}
	return u.String(), nil
}

// portOf is u's port, the scheme's default when it names none.
func portOf(u *neturl.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

// header sets the caller's headers.
func (t *sseTransport) header(h http.Header) {
	for k, v := range t.opts.Header {
		h[k] = append([]string(nil), v...)
	}
}

// dispatch routes one message of the stream: a response by id, progress
// by token; the server's requests are answered with POSTs.
func (t *sseTransport) dispatch(data []byte) {
	m, derr := jsonrpc.Decode(data)
	if derr != nil {
		t.opts.Logger.Warn("the server sent an event that is not JSON-RPC", "err", derr.Message)
		return
	}
	switch m.Kind {
	case jsonrpc.KindResponse:
		t.calls.respond(m.ID, reply{m: m}, t.stats, t.opts.Logger)
	case jsonrpc.KindNotification:
		if m.Method != mcp.NotificationProgress {
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
		// One stream carries every call's: a request of the server's is
		// the call's only while that call is the one in flight.
		t.side.serve(t.lifetime, m, mcp.Legacy, t.calls.sole())
	}
}

// tooLarge fails the call whose response ran past the limit, when what
// could be read of it names one.
func (t *sseTransport) tooLarge(scan *jsonrpc.IDScanner) {
	id, ok := tooLargeResponse(scan)
	t.opts.Logger.Warn("dropped an event past the message limit", "limit", t.opts.MaxMessageBytes, "id", id)
	if ok {
		t.calls.respond(id, reply{err: &ResponseTooLargeError{Limit: t.opts.MaxMessageBytes}}, t.stats, t.opts.Logger)
	}
}

func (t *sseTransport) start(ctx context.Context, req outgoing) (*exchange, error) {
	ex := newExchange(ctx, req, t.stats)
	if !t.calls.add(req, ex) {
		return nil, ErrConnectionLost
	}
	forget := func(abandon bool) { t.calls.forget(req.id, req.token, abandon) }
	// The POST's answer says only that the server took the message, and
	// the call's answer may come on the stream first: the POST is not
	// cut short when the call ends with its answer — cutting it could
	// cancel the connection another request waits to reuse, failing that
	// request — only when the call is given up (onCancel), the stream
	// ends, or answerTimeout passes.
	postCtx, abort := context.WithTimeout(context.WithoutCancel(ctx), answerTimeout)
	unlink := context.AfterFunc(t.lifetime, abort)
	posted := make(chan struct{})
	ex.onFinish = func() { forget(false) }
	ex.onCancel = func(id jsonrpc.ID, reason string) Cancellation {
		abort()
		forget(true)
		// A POST of its own, not waited for, and sent after the
		// request's POST ended: it must not overtake what it cancels.
		params, _ := json.Marshal(mcp.CancelledParams{RequestID: id, Reason: reason})
		if !t.side.postCancel(jsonrpc.AppendNotification(nil, mcp.NotificationCancelled, params), mcp.Legacy, id, posted) {
			return CancelNotSent
		}
		return CancelQueued
	}
	body := jsonrpc.AppendRequest(nil, req.id, req.method, req.params)
	go func() {
		defer close(posted)
		defer unlink()
		defer abort()
		if err := t.post(postCtx, body, mcp.Legacy, req.method); err != nil && postCtx.Err() == nil {
			ex.deliver(reply{err: err})
		}
	}()
	return ex, nil
}

func (t *sseTransport) notify(ctx context.Context, method string, params any, era mcp.Era) error {
	frame, err := notification(method, params)
	if err != nil {
		return err
	}
	return t.post(ctx, frame, era, method)
}

// post sends one message to the endpoint; the server's answer says only
// that it took it (202, or 200), and its body is not read past 64 KiB.
func (t *sseTransport) post(ctx context.Context, body []byte, _ mcp.Era, _ string) error {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, t.endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	t.header(hreq.Header)
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := t.hc.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return sendError(t.endpoint, err)
	}
	defer resp.Body.Close()
	if re := redirectOf(resp); re != nil {
		return re
	}
	if resp.StatusCode/100 != 2 {
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &StatusError{Status: resp.StatusCode, Body: strings.TrimSpace(clip(text)), RetryAfter: resp.Header.Get("Retry-After")}
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return nil
}

// initialized has nothing to record: this transport carries no version
// or session header.
func (t *sseTransport) initialized(string) {}

// ready has nothing to wait for: the stream was open before the first
// message was sent.
func (t *sseTransport) ready(context.Context, time.Duration) {}

func (t *sseTransport) done() <-chan struct{} { return t.ended }

// lost ends every call in flight once the stream ends, and the POSTs
// and answers of its session with them.
func (t *sseTransport) lost() {
	t.stop()
	t.calls.lose()
}

// close ends the stream, which ends the session, and waits up to grace
// for its reader.
func (t *sseTransport) close(grace time.Duration) error {
	t.stop()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-t.ended:
	case <-timer.C:
	}
	t.hc.CloseIdleConnections()
	return nil
}

package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// DialHTTP connects to the Streamable HTTP endpoint at url.
func DialHTTP(ctx context.Context, url string, opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.fill()
	hc := withAuthorizer(withoutRedirects(o.HTTPClient), o.Authorizer)
	stats := &counters{}
	t := &httpTransport{url: url, hc: hc, opts: o, stats: stats, gone: make(chan struct{})}
	t.side = newSidePosts(o, stats, t.post)
	return newClient(ctx, t, o, stats)
}

// newHTTPClient is the HTTP client of a connection whose Options name
// none: enough idle connections kept for the POSTs of calls in parallel.
func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}
}

// StatusError is an HTTP answer that carried no JSON-RPC response: a
// proxy's error page, a 404 for a session that ended, a 405.
type StatusError struct {
	Status int
	Body   string // its start, for the message
	// RetryAfter is the Retry-After header, unparsed ("" when absent):
	// a 429 or 503 says when to come back (retry.ParseRetryAfter).
	RetryAfter string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("client: the server answered HTTP %d: %s", e.Status, e.Body)
}

// httpTransport sends each request as a POST and reads its answer, a JSON
// body or an SSE stream, on the request's own goroutine.
type httpTransport struct {
	url   string
	hc    *http.Client
	opts  Options
	stats *counters

	side sidePosts // answers to the server's requests, cancellations

	mu      sync.Mutex
	session string // the 2025 session id, once initialize gave one
	version string // the 2025 protocol version, once negotiated
	pending map[jsonrpc.ID]*exchange
	byToken map[string]*exchange
	closing context.CancelFunc // ends the 2025 GET stream
	gone    chan struct{}      // closed by close
	gaveUp  time.Time          // when a call was last given up (see sole)
}

func (t *httpTransport) done() <-chan struct{} { return t.gone }

// sessionGone reports whether err is the answer to a request of a 2025
// session the server no longer knows (404 with the session's id), and
// forgets the session, so that the next initialize starts a new one.
func (t *httpTransport) sessionGone(err error) bool {
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.session == "" {
		return false
	}
	t.session = ""
	if t.closing != nil {
		t.closing() // the old session's stream
		t.closing = nil
	}
	return true
}

func (t *httpTransport) initialized(version string) {
	t.mu.Lock()
	t.version = version
	t.mu.Unlock()
}

// ready opens the 2025 session's stream and returns once the server has
// answered the GET (or after wait at the latest): a server sends what is
// not tied to a request (an elicitation, say) on that stream, and a server
// that finds no stream open may drop it, so the first call must not race
// the stream's opening.
func (t *httpTransport) ready(ctx context.Context, wait time.Duration) {
	streamCtx, cancel := context.WithCancel(context.Background())
	opened := make(chan struct{})
	t.mu.Lock()
	if t.closing != nil {
		t.closing() // a stream of the session before a restart
	}
	t.closing = cancel
	t.mu.Unlock()
	go t.listen(streamCtx, opened)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-opened:
	case <-ctx.Done():
	case <-timer.C:
	}
}

// track registers a request in flight, so that what the server sends for
// it on another stream reaches it; the returned func forgets it.
func (t *httpTransport) track(req outgoing, ex *exchange) func() {
	t.mu.Lock()
	if t.pending == nil {
		t.pending, t.byToken = map[jsonrpc.ID]*exchange{}, map[string]*exchange{}
	}
	t.pending[req.id] = ex
	if req.token != "" {
		t.byToken[req.token] = ex
	}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.pending, req.id)
		if req.token != "" {
			delete(t.byToken, req.token)
		}
		t.mu.Unlock()
	}
}

// sole is the one request in flight, or nil when there are none or
// several.
func (t *httpTransport) sole() *exchange {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.gaveUp) < attributionGrace {
		return nil // a call given up on may still be asking (inflight.sole)
	}
	return soleOf(t.pending)
}

// route hands a message that arrived on a stream not its own to its
// request: a response by id, progress by token.
func (t *httpTransport) route(m jsonrpc.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch m.Kind {
	case jsonrpc.KindResponse:
		if ex := t.pending[m.ID]; ex != nil {
			ex.deliver(reply{m: m})
		}
	case jsonrpc.KindNotification:
		if m.Method == mcp.NotificationProgress {
			if token, p, ok := progressOf(m.Params); ok && t.byToken[token] != nil {
				t.byToken[token].deliverProgress(p)
			}
		}
	}
}

// listen keeps the 2025 session's GET stream open until the client
// closes: server requests are answered, responses and progress routed.
// opened is closed once the first GET has its answer.
// A server that offers no such stream (405) is left alone; a stream that
// ends is reopened after the server's retry delay, with Last-Event-ID.
func (t *httpTransport) listen(ctx context.Context, opened chan<- struct{}) {
	var cursor sseCursor
	for attempt := 0; ctx.Err() == nil; attempt++ {
		resp, err := t.openStream(ctx, cursor.lastID)
		if attempt == 0 && opened != nil {
			close(opened) // the server answered, or the first try failed
			opened = nil
		}
		if errors.Is(err, errNoStream) {
			t.redirected(err, "the session's event stream")
			return // no session stream here
		}
		if err == nil {
			attempt = 0
			t.readEvents(ctx, resp.Body, outgoing{era: mcp.Legacy}, nil, &cursor)
			resp.Body.Close()
		}
		if !waitToReconnect(ctx, attempt, cursor.retry) {
			return
		}
	}
}

// redirected logs err when it is a redirect of a stream's GET, which
// fails no caller's request (a resumed call is lost all the same: its POST
// reached the server), and reports whether it was one.
func (t *httpTransport) redirected(err error, stream string) bool {
	re, ok := errors.AsType[*RedirectError](err)
	if ok {
		t.opts.Logger.Warn("the server answered the GET of "+stream+" with a redirect, which the client does not follow",
			"status", re.Status, "location", re.Location)
	}
	return ok
}

// errNoStream is a GET the server answered with something other than an
// event stream: no session stream there, or no resuming that one.
var errNoStream = errors.New("client: the server offers no event stream here")

// openStream GETs the 2025 session's stream, from after lastID when it is
// set (Last-Event-ID). A transport failure is returned as it is (worth
// another try); any answer but an event stream is errNoStream, wrapping
// a *RedirectError when the answer was a redirect.
func (t *httpTransport) openStream(ctx context.Context, lastID string) (*http.Response, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err != nil {
		return nil, err
	}
	t.header(hreq.Header, mcp.Legacy, "", "", "")
	hreq.Header.Del("Content-Type")
	hreq.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		hreq.Header.Set(mcp.HeaderLastEventID, lastID)
	}
	resp, err := t.hc.Do(hreq)
	if err != nil {
		return nil, err
	}
	if re := redirectOf(resp); re != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %w", errNoStream, re)
	}
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || media != "text/event-stream" {
		resp.Body.Close()
		return nil, fmt.Errorf("%w (HTTP %d)", errNoStream, resp.StatusCode)
	}
	return resp, nil
}

// header sets the headers every request of the era carries.
func (t *httpTransport) header(h http.Header, era mcp.Era, version, method, name string) {
	for k, v := range t.opts.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if era == mcp.Modern {
		h.Set(mcp.HeaderProtocolVersion, version)
		h.Set(mcp.HeaderMethod, method)
		if name != "" {
			h.Set(mcp.HeaderName, name)
		}
		return
	}
	t.mu.Lock()
	session, v := t.session, t.version
	t.mu.Unlock()
	if session != "" {
		h.Set(mcp.HeaderSessionID, session)
	}
	if v != "" {
		h.Set(mcp.HeaderProtocolVersion, v)
	}
}

func (t *httpTransport) start(ctx context.Context, req outgoing) (*exchange, error) {
	ex := newExchange(ctx, req, t.stats)
	// The request lives until the call ends, not with the caller's ctx:
	// the call decides when to give up, and how to say so.
	reqCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	hreq, err := http.NewRequestWithContext(reqCtx, http.MethodPost, t.url, bytes.NewReader(jsonrpc.AppendRequest(nil, req.id, req.method, req.params)))
	if err != nil {
		abort()
		return nil, err
	}
	t.header(hreq.Header, req.era, req.version, req.method, req.name)
	if req.era == mcp.Modern {
		for _, h := range req.headers {
			hreq.Header.Set(h[0], h[1])
		}
	}
	forget := t.track(req, ex)
	// A finished exchange releases its request once its body is read to
	// the end (exchange does), so that the connection is kept for the
	// next one; only a cancellation cuts it.
	ex.onFinish = forget
	ex.onCancel = func(id jsonrpc.ID, reason string) Cancellation {
		forget()
		t.mu.Lock()
		t.gaveUp = time.Now()
		t.mu.Unlock()
		defer abort()
		if req.era != mcp.Modern {
			// 2025: disconnecting is not cancellation; say it with a POST,
			// on a goroutine of its own: a server that holds it open must
			// not hold the caller who gave up.
			params, _ := json.Marshal(mcp.CancelledParams{RequestID: id, Reason: reason})
			if !t.side.postCancel(jsonrpc.AppendNotification(nil, mcp.NotificationCancelled, params), req.era, id, nil) {
				return CancelNotSent
			}
			return CancelQueued
		}
		// 2026: closing the request's stream is the cancellation.
		return CancelSent
	}
	go func() {
		defer abort()
		t.exchange(hreq, req, ex)
	}()
	return ex, nil
}

// exchange sends the request and reads its answer onto ex.
func (t *httpTransport) exchange(hreq *http.Request, req outgoing, ex *exchange) {
	resp, err := t.hc.Do(hreq)
	if err != nil {
		if hreq.Context().Err() == nil {
			ex.deliver(reply{err: sendError(t.url, err)})
		}
		return
	}
	defer resp.Body.Close()
	if re := redirectOf(resp); re != nil {
		ex.deliver(reply{err: re})
		return
	}
	if req.method == mcp.MethodInitialize {
		if sid := resp.Header.Get(mcp.HeaderSessionID); sid != "" {
			t.mu.Lock()
			t.session = sid
			t.mu.Unlock()
		}
	}
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case media == "text/event-stream" && resp.StatusCode == http.StatusOK:
		var cursor sseCursor
		if t.readEvents(hreq.Context(), resp.Body, req, ex, &cursor) {
			// The stream ends after its response: read it to its end so
			// that the connection can serve the next request, but not for
			// long: a server that keeps it open loses the connection.
			cut := time.AfterFunc(drainWait, func() { resp.Body.Close() })
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			cut.Stop()
			return
		}
		resp.Body.Close()
		t.resume(hreq.Context(), req, ex, &cursor)
	case media == "application/json":
		body, err := io.ReadAll(io.LimitReader(resp.Body, int64(t.opts.MaxMessageBytes)+1))
		resp.Body.Close() // before the call learns its answer: the connection goes back first
		if err != nil {
			if hreq.Context().Err() == nil {
				ex.deliver(reply{err: fmt.Errorf("%w: %v", ErrConnectionLost, err)})
			}
			return
		}
		m, derr := jsonrpc.Decode(body)
		// A 404 to a request of a 2025 session says the server no longer
		// knows the session, whatever its body (mcprel's own carries a
		// JSON-RPC error): the spec's signal to initialize again, which
		// renewSession reads from the StatusError.
		gone := resp.StatusCode == http.StatusNotFound && hreq.Header.Get(mcp.HeaderSessionID) != ""
		if derr != nil || m.Kind != jsonrpc.KindResponse || gone {
			ex.deliver(reply{err: &StatusError{Status: resp.StatusCode, Body: clip(body), RetryAfter: resp.Header.Get("Retry-After")}})
			return
		}
		ex.deliver(reply{m: m})
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		ex.deliver(reply{err: &StatusError{Status: resp.StatusCode, Body: strings.TrimSpace(clip(body)), RetryAfter: resp.Header.Get("Retry-After")}})
	}
}

// sendError is the error of a request to url the HTTP client failed to
// make: a *ConnectError when no connection could be opened — the dial
// failed, or the TLS handshake, which comes before any byte of the
// request — so the request never left; ErrConnectionLost otherwise (it
// may have reached the server).
func sendError(url string, err error) error {
	var refused *AuthorizationError
	if errors.As(err, &refused) {
		return refused // the server answered: nothing ran
	}
	var op *net.OpError
	if errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect") || handshakeFailed(err) {
		return &ConnectError{URL: url, Err: err}
	}
	return fmt.Errorf("%w: %v", ErrConnectionLost, err)
}

// handshakeFailed reports whether err is a TLS handshake's failure: a
// certificate the client does not trust, an alert from the server, a
// peer that speaks no TLS.
func handshakeFailed(err error) bool {
	return errors.As(err, new(*tls.CertificateVerificationError)) || errors.As(err, new(x509.UnknownAuthorityError)) ||
		errors.As(err, new(x509.HostnameError)) || errors.As(err, new(x509.CertificateInvalidError)) ||
		errors.As(err, new(tls.RecordHeaderError)) || errors.As(err, new(tls.AlertError))
}

// maxResumes bounds the reconnections of one request's stream.
const maxResumes = 5

// resume reconnects a 2025 stream that ended before its response: after
// the server's retry delay exactly (or a backoff of its own where the
// server gave none), a GET with Last-Event-ID picks the stream up where it
// stopped, as that era specifies. The 2026 era has no resumption: a lost
// stream is a lost request. It closes ex.response when it gives up.
func (t *httpTransport) resume(ctx context.Context, req outgoing, ex *exchange, cursor *sseCursor) {
	defer func() {
		if ctx.Err() == nil {
			ex.lose()
		}
	}()
	if req.era == mcp.Modern || cursor.lastID == "" {
		return
	}
	for attempt := range maxResumes {
		if !waitToReconnect(ctx, attempt, cursor.retry) {
			return
		}
		resp, err := t.openStream(ctx, cursor.lastID)
		if errors.Is(err, errNoStream) {
			if !t.redirected(err, "a call's event stream, to resume it") {
				t.opts.Logger.Debug("the server refused to resume a stream", "err", err)
			}
			return
		}
		if err != nil {
			continue
		}
		t.stats.resumed.Add(1)
		done := t.readEvents(ctx, resp.Body, req, ex, cursor)
		resp.Body.Close()
		if done {
			return
		}
	}
}

// readEvents reads an SSE stream: this request's progress and its
// response, answering the server's requests on the way; it records the
// stream's cursor and reports whether the response arrived.
func (t *httpTransport) readEvents(ctx context.Context, body io.Reader, req outgoing, ex *exchange, cursor *sseCursor) bool {
	return readSSE(body, t.opts.MaxMessageBytes, cursor, func(e sseEvent) bool {
		if e.tooLarge != nil {
			return t.tooLarge(e.tooLarge, req, ex)
		}
		return t.event(ctx, e.data, req, ex)
	})
}

// tooLarge fails the call whose response was past the limit, when what
// could be read of it names one; true when it was this stream's own.
func (t *httpTransport) tooLarge(scan *jsonrpc.IDScanner, req outgoing, ex *exchange) bool {
	id, ok := tooLargeResponse(scan)
	t.opts.Logger.Warn("dropped an event past the message limit", "limit", t.opts.MaxMessageBytes, "id", id)
	if !ok {
		return false
	}
	r := reply{err: &ResponseTooLargeError{Limit: t.opts.MaxMessageBytes}}
	if ex != nil && id == req.id {
		ex.deliver(r)
		return true
	}
	t.mu.Lock()
	other := t.pending[id]
	t.mu.Unlock()
	if other != nil {
		other.deliver(r)
	}
	return false
}

// event handles one SSE event's data; true once the response arrived.
func (t *httpTransport) event(ctx context.Context, data []byte, req outgoing, ex *exchange) bool {
	m, derr := jsonrpc.Decode(data)
	if derr != nil {
		t.opts.Logger.Warn("the server sent an event that is not JSON-RPC", "err", derr.Message)
		return false
	}
	switch m.Kind {
	case jsonrpc.KindResponse:
		if ex != nil && m.ID == req.id {
			ex.deliver(reply{m: m})
			return true
		}
		t.route(m)
	case jsonrpc.KindNotification:
		if m.Method != mcp.NotificationProgress {
			switch {
			case ex != nil && ex.takesNotes():
				ex.note(m)
			case t.opts.OnNotification != nil:
				t.opts.OnNotification(m.Method, m.Params)
			}
			return false
		}
		if token, p, ok := progressOf(m.Params); ok && ex != nil && token == req.token {
			ex.deliverProgress(p)
			return false
		}
		t.route(m)
	case jsonrpc.KindRequest:
		// A request on a call's own stream is that call's. One on the
		// session's stream (ex nil) names no call: it is the call's only
		// while that call is the one in flight, as on stdio.
		if ex == nil {
			ex = t.sole()
		}
		t.side.serve(ctx, m, req.era, ex)
	}
	return false
}

// sidePosts are the POSTs a client makes beside its requests, over 2025
// Streamable HTTP and over HTTP+SSE alike: answers to the server's
// requests and cancellations, each kind within its bound (bounds.go).
type sidePosts struct {
	opts    Options
	stats   *counters
	answers budget        // the server's requests being answered, each with a POST
	cancels chan struct{} // a slot per notifications/cancelled POST in flight
	post    func(ctx context.Context, body []byte, era mcp.Era, method string) error
}

func newSidePosts(o Options, stats *counters, post func(ctx context.Context, body []byte, era mcp.Era, method string) error) sidePosts {
	return sidePosts{opts: o, stats: stats, post: post,
		answers: budget{maxN: o.MaxServerRequests, maxBytes: o.MaxServerRequestBytes}, cancels: make(chan struct{}, maxCancelPosts)}
}

// serve answers a request a server sent on a stream (elicitation,
// sampling, roots, ping) with a POST of its own, on a goroutine of its
// own: at most Options.MaxServerRequests at a time (and MaxServerRequestBytes of
// their params). The call it is attributed to (ex, when it has a handler
// of its own) answers under that call's clocks; the connection's
// handler under answerTimeout, handler and POST together. Every answer
// costs a connection, so a request past the bound is dropped and counted
// rather than refused: refusing would cost one too.
func (p *sidePosts) serve(ctx context.Context, m jsonrpc.Message, era mcp.Era, ex *exchange) {
	size := len(m.Params)
	if !p.answers.take(size) {
		p.stats.serverDropped.Add(1)
		p.opts.Logger.Debug("dropped a request from the server: too many are being answered", "method", m.Method)
		return
	}
	if m.Method == mcp.MethodPing {
		ex = nil // a ping says nothing of the call's progress: its idle clock runs on
	}
	a := answererFor(ex, p.opts.OnRequest, context.WithoutCancel(ctx))
	go func() {
		defer p.answers.give(size)
		defer a.done()
		answer := a.answer(m)
		if answer == nil {
			p.opts.Logger.Debug("the call ended while its handler answered the server's request; no answer sent", "method", m.Method)
			return
		}
		pctx, cancel := a.ctx, context.CancelFunc(func() {}) // the connection's handler: answerTimeout covers the POST too
		if a.ex != nil {
			pctx, cancel = context.WithTimeout(context.WithoutCancel(a.ctx), answerTimeout)
		}
		defer cancel()
		if err := p.post(pctx, answer, era, ""); err != nil {
			p.opts.Logger.Warn("could not answer the server's request", "method", m.Method, "err", err)
		}
	}()
}

// postCancel POSTs a notifications/cancelled without waiting for it: at
// most maxCancelPosts at a time, each under cancelPostTimeout, which
// covers the wait for after (when set: the request's own POST, which the
// cancellation must not overtake). Past that bound the cancellation is
// dropped and logged. It reports whether the POST was begun.
func (p *sidePosts) postCancel(body []byte, era mcp.Era, id jsonrpc.ID, after <-chan struct{}) bool {
	select {
	case p.cancels <- struct{}{}:
	default:
		p.opts.Logger.Warn("dropped a cancellation: too many are in flight", "id", id)
		return false
	}
	p.stats.cancels.add()
	go func() {
		defer func() { <-p.cancels }()
		ctx, cancel := context.WithTimeout(context.Background(), cancelPostTimeout)
		defer cancel()
		if after != nil {
			select {
			case <-after:
			case <-ctx.Done():
			}
		}
		err := p.post(ctx, body, era, mcp.NotificationCancelled)
		p.stats.cancels.done(err)
		if err != nil {
			p.opts.Logger.Debug("the cancellation POST failed", "id", id, "err", err)
		}
	}()
	return true
}

// drainWait bounds the read of a stream's rest after its response.
const drainWait = time.Second

// post sends a notification (2025 era) and reads its acknowledgement.
func (t *httpTransport) post(ctx context.Context, body []byte, era mcp.Era, method string) error {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	t.header(hreq.Header, era, "", method, "")
	resp, err := t.hc.Do(hreq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if re := redirectOf(resp); re != nil {
		return re
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return &StatusError{Status: resp.StatusCode}
	}
	return nil
}

func (t *httpTransport) notify(ctx context.Context, method string, params any, era mcp.Era) error {
	frame, err := notification(method, params)
	if err != nil {
		return err
	}
	return t.post(ctx, frame, era, method)
}

// close deletes a 2025 session and releases idle connections.
func (t *httpTransport) close(grace time.Duration) error {
	t.mu.Lock()
	session, stop := t.session, t.closing
	t.mu.Unlock()
	if stop != nil {
		stop()
	}
	if session != "" {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		if req, err := http.NewRequestWithContext(ctx, http.MethodDelete, t.url, nil); err == nil {
			t.header(req.Header, mcp.Legacy, "", "", "")
			if resp, err := t.hc.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	t.hc.CloseIdleConnections()
	t.mu.Lock()
	select {
	case <-t.gone:
	default:
		close(t.gone)
	}
	t.mu.Unlock()
	return nil
}

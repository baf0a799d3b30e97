package streamhttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/auth"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/server/conn"
	"github.com/mcprel/mcprel/server/outbound"
)

// ErrSessionEnded is the cause of requests cancelled because their legacy
// session was deleted or expired.
var ErrSessionEnded = errors.New("streamhttp: session ended")

// Handler is the MCP endpoint. Mount it at one path (conventionally /mcp).
type Handler struct {
	srv       *server.Server
	opts      HandlerOptions
	stateless conn.Session // every modern request, each on its own stream
	entry     http.Handler // the Host/Origin check and authentication, then serve

	reading readingBudget // bodies being read and decoded
	metas   mcp.MetaCache // the last _meta parsed: clients repeat theirs on every request
	events  *eventLog     // 2025-era streams kept for Last-Event-ID; nil when disabled

	mu       sync.Mutex
	sessions map[string]*legacySession
	byTenant map[string]int // open sessions per tenant
	draining bool
	stop     chan struct{} // ends the session janitor
	stopOnce sync.Once
}

// NewHandler returns the endpoint for srv. opts may be nil.
func NewHandler(srv *server.Server, opts *HandlerOptions) (*Handler, error) {
	h := &Handler{srv: srv, sessions: make(map[string]*legacySession), byTenant: make(map[string]int), stop: make(chan struct{})}
	if opts != nil {
		h.opts = *opts
	}
	if err := h.opts.normalize(); err != nil {
		return nil, err
	}
	h.reading = readingBudget{max: h.opts.MaxReadingBytes, perTenant: h.opts.MaxReadingBytesPerTenant}
	if !h.opts.tenants() {
		// One tenant: its share is the whole budget.
		h.reading.perTenant = h.opts.MaxReadingBytes
	}
	if r := h.opts.Resume; !r.Disabled {
		perTenant := r.MaxBytesPerTenant
		if !h.opts.tenants() {
			perTenant = r.MaxBytes // one tenant: its share is the whole log
		}
		h.events = newEventLog(r, perTenant, srv.Logger())
	}
	h.stateless = srv.NewSession(conn.Config{Modern: true, StreamPerRequest: true, Transport: "http", QueueCapacity: h.opts.StreamCapacity})
	h.entry = h.opts.hosts().Wrap(h.authenticated(h.opts.authenticator()), Refuse)
	go h.janitor()
	return h, nil
}

// authenticated returns what authenticates a request with a (none when
// a is nil) and serves it for its Principal's tenant. A request that
// arrives with a Principal (an outer auth.Require ran) keeps it.
func (h *Handler) authenticated(a auth.Authenticator) http.Handler {
	serve := http.HandlerFunc(h.serveAuthenticated)
	var check http.Handler = serve
	if a != nil {
		check = auth.Require(serve, a, Refuse)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := auth.FromContext(r.Context()); ok {
			serve(w, r)
			return
		}
		check.ServeHTTP(w, r)
	})
}

// Refuse answers a request refused before it reached the endpoint (its
// Host, Origin or credentials) with a JSON-RPC error body: the
// auth.Refuse of the MCP endpoint.
func Refuse(w http.ResponseWriter, _ *http.Request, status int, message string) {
	writeError(w, status, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "%s", message))
}

// ServeHTTP checks the request's Host and Origin, authenticates it
// unless an outer auth.Require did, and serves it for its tenant.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.entry.ServeHTTP(w, r) }

// serveAuthenticated serves a request that passed the checks, for the tenant of its
// auth.Principal ("" without one).
func (h *Handler) serveAuthenticated(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	r = r.WithContext(server.WithTenant(r.Context(), p.Tenant))
	switch r.Method {
	case http.MethodPost:
		h.post(w, r)
	case http.MethodGet:
		h.get(w, r)
	case http.MethodDelete:
		h.delete(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeError(w, http.StatusMethodNotAllowed, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "method %s not allowed", r.Method))
	}
}

// Guard applies the endpoint's own checks to next, another handler served
// on the same listener (metrics, say), so that it is never easier to reach
// than the MCP endpoint: its Host and Origin allow-lists, and the
// endpoint's authenticator (its tokens, or HandlerOptions.Authenticator)
// when it has one. The wrapping happens once, here: the returned handler
// is safe for concurrent use and costs the same on every request.
func (h *Handler) Guard(next http.Handler) http.Handler {
	if a := h.opts.authenticator(); a != nil {
		next = auth.Require(next, a, nil)
	}
	return h.opts.hosts().Wrap(next, nil)
}

func (h *Handler) post(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Content-Type must be application/json"))
		return
	}
	if !accepts(r, "application/json") || !accepts(r, "text/event-stream") {
		writeError(w, http.StatusNotAcceptable, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Accept must list both application/json and text/event-stream"))
		return
	}
	c := h.reading.open(server.TenantFrom(r.Context()))
	// The body's bytes count until the server has the request (serve
	// releases them then), or until this request is answered otherwise.
	defer c.release()
	r = r.WithContext(withCharge(r.Context(), c))
	body, err := h.readBody(w, r, c)
	if err != nil {
		var tooBig *http.MaxBytesError
		var full errBudget
		switch {
		case errors.As(err, &full):
			status := http.StatusServiceUnavailable
			if full.tenant {
				status = http.StatusTooManyRequests
			}
			// Read the rest without keeping it (under the same deadlines):
			// a client still sending when the answer comes would see its
			// connection reset instead of the answer.
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Retry-After", "1")
			writeError(w, status, jsonrpc.ID{}, overloadedError(full.Error(), 1000))
		case errors.As(err, &tooBig):
			writeError(w, http.StatusRequestEntityTooLarge, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "request body exceeds the %d-byte limit", h.opts.MaxBodyBytes))
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestTimeout, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "the request body arrived too slowly (under %d bytes a second after %v)", h.opts.MinBodyRate, h.opts.BodyTimeout))
		}
		return // otherwise the client went away while sending
	}
	m, derr := jsonrpc.Decode(body)
	if derr != nil {
		writeError(w, http.StatusBadRequest, m.ID, derr)
		return
	}
	if m.Kind == jsonrpc.KindRequest && h.opts.Permit != nil {
		if err := h.opts.Permit(r, m.Method, m.Params); err != nil {
			auth.Answer(w, r, err, func(w http.ResponseWriter, _ *http.Request, status int, message string) {
				writeError(w, status, m.ID, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "%s", message))
			})
			return
		}
	}
	if h.isDraining() && m.Kind == jsonrpc.KindRequest {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, m.ID, jsonrpc.NewError(mcp.CodeUnavailable, "server shutting down"))
		return
	}

	// The request's _meta is parsed here, once: it decides the era, and
	// the server is handed it with the request.
	var p parsed
	if m.Kind == jsonrpc.KindRequest {
		p.meta, p.raw, p.err = h.metas.Parse(server.TenantFrom(r.Context()), m.Params)
	}
	headerVersion := r.Header.Get(mcp.HeaderProtocolVersion)
	sid := r.Header.Get(mcp.HeaderSessionID)
	switch {
	case p.err == nil && (p.meta.IsModern() || mcp.IsModernVersion(headerVersion)):
		h.postModern(w, r, m, &p)
	case sid != "":
		h.postLegacy(w, r, m, &p, sid, headerVersion)
	case m.Kind == jsonrpc.KindRequest && m.Method == mcp.MethodInitialize:
		h.initialize(w, r, m)
	case mcp.IsLegacyVersion(headerVersion):
		writeError(w, http.StatusBadRequest, m.ID, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "missing %s header: send initialize first", mcp.HeaderSessionID))
	default:
		h.postModern(w, r, m, &p)
	}
}

// parsed is a request's _meta as the handler read it.
type parsed struct {
	meta mcp.RequestMeta
	raw  json.RawMessage // nil when the request has no _meta
	err  error           // why _meta could not be read
}

// handle hands a request to sess, with its _meta when it was read. A
// request answered with one JSON body runs on this goroutine: it has
// nothing to write before its final frame.
func (p *parsed) handle(ctx context.Context, sess conn.Session, m jsonrpc.Message, out *outbound.Queue, sse bool) {
	prep := conn.Prepared{RunHere: !sse}
	if p != nil && p.err == nil {
		prep.Meta, prep.RawMeta = &p.meta, p.raw
	}
	sess.HandleRequest(ctx, m, prep, out)
}

// readBody reads the request body within MaxBodyBytes and on time: the
// read deadline moves with the bytes received, so the body must arrive
// within BodyTimeout plus a second for every MinBodyRate bytes. The buffer
// grows as bytes arrive, never ahead of them (a declared Content-Length
// alone allocates nothing), and ends at the declared size, not at double
// it: the body is held once.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, c *charge) ([]byte, error) {
	rc := http.NewResponseController(w)
	body := http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes)
	start := time.Now()
	limit := h.opts.MaxBodyBytes + 1 // room to see the end
	if r.ContentLength > 0 {
		limit = min(r.ContentLength, h.opts.MaxBodyBytes) + 1
	}
	buf := make([]byte, 0, min(limit, 16<<10))
	if err := c.grow(int64(cap(buf))); err != nil {
		return nil, err
	}
	deadlines := true
	for {
		if deadlines {
			allowed := h.opts.BodyTimeout + time.Duration(float64(len(buf))/float64(h.opts.MinBodyRate)*float64(time.Second))
			// A transport without read deadlines (some test servers) is
			// read without one.
			deadlines = rc.SetReadDeadline(start.Add(allowed)) == nil
		}
		if len(buf) == cap(buf) {
			size := max(min(2*cap(buf), int(limit)), cap(buf)+4096)
			if err := c.grow(int64(size - cap(buf))); err != nil {
				return nil, err
			}
			grown := make([]byte, len(buf), size)
			copy(grown, buf)
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// postModern serves a stateless 2026-07-28 request.
func (h *Handler) postModern(w http.ResponseWriter, r *http.Request, m jsonrpc.Message, p *parsed) {
	if m.Kind != jsonrpc.KindRequest {
		// The modern era defines no client notification over HTTP (a
		// request is cancelled by closing its stream) and no server
		// request a client could answer; accept and ignore them.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if e := h.checkModernHeaders(r, m, p); e != nil {
		writeError(w, statusFor(e.Code, true), m.ID, e)
		return
	}
	sse := h.stateless.Streams(m.Method, &p.meta)
	// Closing the request's stream is its cancellation: the request lives
	// exactly as long as the HTTP request, and says why it ended.
	// serve returns as soon as the client goes away or stops reading.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	h.serve(w, r, h.stateless, ctx, m, p, sse, cancel, nil)
}

// endCause is why a modern request's context ends with its stream.
func endCause(end string) error {
	switch end {
	case endWriteFailed:
		return server.ErrSlowConsumer
	case endClientClosed:
		return server.ErrDisconnected
	}
	return server.ErrRequestDone
}

// checkModernHeaders applies the 2026-07-28 rules: _meta complete, and the
// routing headers mirroring the body.
func (h *Handler) checkModernHeaders(r *http.Request, m jsonrpc.Message, p *parsed) *jsonrpc.Error {
	if p.err != nil {
		return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "%v", p.err)
	}
	meta := &p.meta
	if err := meta.CheckModern(p.raw != nil); err != nil {
		return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "%v", err)
	}
	body := *meta.ProtocolVersion
	switch hv := r.Header.Get(mcp.HeaderProtocolVersion); {
	case hv == "":
		return jsonrpc.NewError(mcp.CodeHeaderMismatch, "missing %s header", mcp.HeaderProtocolVersion)
	case hv != body:
		return jsonrpc.NewError(mcp.CodeHeaderMismatch, "%s header %q does not match _meta protocolVersion %q", mcp.HeaderProtocolVersion, hv, body)
	case !mcp.IsModernVersion(body):
		return jsonrpc.NewError(mcp.CodeUnsupportedVersion, "unsupported protocol version %q", body).
			WithData(mcp.UnsupportedVersionData{Supported: mcp.SupportedVersions(), Requested: body})
	}
	if hm, ok := headerValue(r, mcp.HeaderMethod); !ok || hm != m.Method {
		return jsonrpc.NewError(mcp.CodeHeaderMismatch, "%s header must be present and equal the body's method %q", mcp.HeaderMethod, m.Method)
	}
	if member := h.stateless.NameMember(m.Method); member != "" {
		var want string
		json.Unmarshal(jsonrpc.Member(m.Params, member), &want)
		if hn, ok := headerValue(r, mcp.HeaderName); !ok || hn != want {
			return jsonrpc.NewError(mcp.CodeHeaderMismatch, "%s header must be present and equal params.%s", mcp.HeaderName, member)
		}
		if m.Method == mcp.MethodToolsCall {
			return h.checkParamHeaders(r, want, jsonrpc.Member(m.Params, "arguments"))
		}
	}
	return nil
}

// checkParamHeaders checks the Mcp-Param-* headers of a tool call against
// the arguments they mirror: present exactly when the argument has a value,
// and equal to it after decoding.
func (h *Handler) checkParamHeaders(r *http.Request, tool string, args json.RawMessage) *jsonrpc.Error {
	for _, p := range h.stateless.HeaderParams(tool) {
		header := mcp.HeaderParamPrefix + p.Name
		want, has := p.Value(args)
		if !has {
			continue // no value: no header expected
		}
		got, ok := headerValue(r, header)
		switch {
		case !ok && len(r.Header.Values(header)) == 0:
			return jsonrpc.NewError(mcp.CodeHeaderMismatch, "missing %s header for argument %s", header, strings.Join(p.Path, "."))
		case !ok:
			return jsonrpc.NewError(mcp.CodeHeaderMismatch, "%s header is not valid header text or base64", header)
		case got != want:
			return jsonrpc.NewError(mcp.CodeHeaderMismatch, "%s header does not match argument %s", header, strings.Join(p.Path, "."))
		}
	}
	return nil
}

// headerValue reads a routing header, decoding the =?base64?…?= form used
// for values that are not safe header text. A plain value must be visible
// ASCII, spaces and tabs; a malformed one reads as absent.
func headerValue(r *http.Request, name string) (string, bool) {
	vals := r.Header.Values(name)
	if len(vals) != 1 {
		return "", false
	}
	return mcp.DecodeHeaderValue(vals[0])
}

func (h *Handler) postLegacy(w http.ResponseWriter, r *http.Request, m jsonrpc.Message, p *parsed, sid, headerVersion string) {
	ls := h.lookup(sid, server.TenantFrom(r.Context()))
	if ls == nil {
		writeError(w, http.StatusNotFound, m.ID, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "session not found: it ended or never existed; initialize a new one"))
		return
	}
	defer h.done(ls)
	if headerVersion != "" && !mcp.IsLegacyVersion(headerVersion) {
		writeError(w, http.StatusBadRequest, m.ID, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "unsupported %s %q", mcp.HeaderProtocolVersion, headerVersion))
		return
	}
	if m.Kind != jsonrpc.KindRequest {
		// Notifications (such as notifications/cancelled) and answers to
		// the server's own requests.
		ls.sess.Handle(ls.ctx, m, nil)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	// A dropped stream is not a cancellation in this era: the request
	// lives as long as its session, and the client cancels with a POSTed
	// notifications/cancelled.
	h.serve(w, r, ls.sess, ls.ctx, m, p, ls.sess.Streams(m.Method, &p.meta), nil, ls)
}

// serve dispatches a request to sess with ctx bounding its life, and
// writes its response stream: SSE when sse, otherwise one JSON body. ls is
// the request's legacy session, nil in the modern era; cancel ends a
// modern request with its stream.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, sess conn.Session, ctx context.Context, m jsonrpc.Message, p *parsed, sse bool, cancel context.CancelCauseFunc, ls *legacySession) streamStats {
	modern := ls == nil
	out := outbound.New(h.opts.StreamCapacity)
	// A 2025-era SSE stream is numbered and kept in the resumption log:
	// when its connection drops before the response, the source goes on
	// being drained into the log (and closed when the log is dropped), so
	// that the client can come back for the rest with Last-Event-ID.
	var sink *resumable
	if sse && ls != nil && ls.log != nil {
		if s, c := h.events.open(ls.log, out, m.ID, m.Method); s != nil {
			sink = &resumable{log: h.events, s: s, c: c, prime: primes(ls.sess)}
		}
	}
	if sink == nil {
		defer out.Close()
	}
	rc := http.NewResponseController(w)
	// The request body is read; a read deadline left over from
	// http.Server.ReadTimeout must not end a long call.
	rc.SetReadDeadline(time.Time{})
	// The body's reading is done: the request is the server's now, counted
	// by its admission.
	releaseCharge(r.Context())
	if !sse && cancel != nil {
		// Answered with one JSON body, the call runs on this goroutine
		// (Prepared.RunHere): the client going away must still end it.
		stop := context.AfterFunc(r.Context(), func() { cancel(server.ErrDisconnected) })
		defer stop()
	}
	p.handle(ctx, sess, m, out, sse)
	m.Params = nil
	if sse && modern && out.ErrorFirst() {
		// Refused at once (overloaded, invalid): a plain JSON answer
		// with the error's own status and Retry-After, not an event
		// stream that says 200.
		sse = false
	}
	var st streamStats
	if sse {
		st = h.writeSSE(w, r, rc, out, sink)
		if sink != nil {
			// Before anything is logged: a drainer takes the source over
			// if the response is still to come.
			h.events.detach(sink.s, sink.c, out)
		}
	} else {
		st = h.writeJSON(w, r, rc, out, modern)
	}
	if cancel != nil {
		// End the request before its outbound queue closes: a handler returning
		// in between would otherwise be recorded as completed, with its
		// response refused by the closed outbound queue.
		cancel(endCause(st.end))
	}
	args := []any{"id", m.ID, "method", m.Method, "sse", sse, "frames", st.frames, "final", st.final, "end", st.end}
	if sink != nil {
		args = append(args, "event_stream", sink.s.key)
	}
	h.srv.Logger().Debug("stream", args...)
	if !sse && st.end == endCancelled {
		// Cancelled before any response: there is none to give. Drop the
		// connection rather than invent an empty one.
		panic(http.ErrAbortHandler)
	}
	if !modern && !st.final && st.end != endCancelled {
		// 2025 era: the connection is gone but the call goes on. On a
		// numbered stream (sink), what the call still sends is kept in the
		// resumption log, and the client gets it by GETting the endpoint
		// with the Last-Event-ID it saw, within the log's TTL and bounds
		// (see ResumeOptions). Otherwise (a JSON response, resumption
		// disabled, or the session out of stream slots) the result is
		// recorded with its terminal state and cannot reach this client.
		h.srv.Logger().Info("legacy stream ended before its response; the call continues", "id", m.ID, "method", m.Method, "end", st.end, "resumable", sink != nil)
	}
	return st
}

// streamStats says what a response stream carried and why it ended.
type streamStats struct {
	frames int  // messages written
	final  bool // the response was among them
	end    string
}

// Reasons a stream ends.
const (
	endComplete     = "complete"      // the response was written
	endCancelled    = "cancelled"     // the request ended without a response
	endClientClosed = "client_closed" // the client went away
	endWriteFailed  = "write_failed"  // a write failed or timed out
	endDisplaced    = "displaced"     // a resume (GET with Last-Event-ID) took the stream over
)

// writeJSON waits for the request's response and writes it as the body,
// with a status that reflects a protocol error in the modern era.
func (h *Handler) writeJSON(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, out *outbound.Queue, modern bool) streamStats {
	for {
		f, ok := out.TryNext()
		if !ok {
			if out.Closed() {
				return streamStats{end: endCancelled}
			}
			select {
			case <-out.Ready():
				continue
			case <-r.Context().Done():
				return streamStats{end: endClientClosed}
			}
		}
		if f.Kind != outbound.Final {
			continue // nowhere to put it: this response is not a stream
		}
		status := http.StatusOK
		if f.ErrorCode != 0 {
			status = statusFor(f.ErrorCode, modern)
			if f.ErrorCode == mcp.CodeOverloaded || f.ErrorCode == mcp.CodeRateLimited {
				setRetryAfter(w, f.Data)
			}
		}
		rc.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if _, err := w.Write(f.Data); !h.wrote(err) {
			return streamStats{end: endWriteFailed}
		}
		return streamStats{frames: 1, final: true, end: endComplete}
	}
}

// writeSSE streams the request's messages until its response is written or
// the request ends without one. With sink, each message is numbered and
// kept in the resumption log before it is written, so that one the client
// does not receive can be replayed; without, messages carry no ids.
func (h *Handler) writeSSE(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, out *outbound.Queue, sink *resumable) streamStats {
	var st streamStats
	var priming []byte
	var displaced <-chan struct{}
	if sink != nil {
		displaced = sink.c.displaced
		if sink.prime {
			priming = h.primingEvent(sink.s.key)
		}
	}
	if !h.startSSE(w, rc, priming) {
		st.end = endWriteFailed
		return st
	}
	first := priming == nil // the retry: field goes with the first event
	keepalive := time.NewTicker(h.opts.KeepAlive)
	defer keepalive.Stop()
	for {
		select {
		case <-displaced:
			st.end = endDisplaced
			return st
		default:
		}
		f, ok := out.TryNext()
		if !ok {
			if out.Closed() {
				if sink != nil {
					sink.log.endNoFinal(sink.s)
				}
				st.end = endCancelled
				return st
			}
			select {
			case <-out.Ready():
				continue
			case <-keepalive.C:
				if !h.writeKeepalive(w, rc) {
					st.end = endWriteFailed
					return st
				}
				continue
			case <-r.Context().Done():
				st.end = endClientClosed
				return st
			case <-displaced:
				st.end = endDisplaced
				return st
			}
		}
		var ev []byte
		if sink != nil {
			seq := sink.log.append(sink.s, f)
			ev = h.idEvent(sink.s.key, seq, f.Data, first)
			first = false
		} else {
			ev = sseEvent(f.Data)
		}
		if !h.writeEvent(w, rc, ev) {
			st.end = endWriteFailed
			return st
		}
		st.frames++
		keepalive.Reset(h.opts.KeepAlive)
		if f.Kind == outbound.Final {
			if sink != nil {
				sink.log.delivered(sink.s)
			}
			st.final, st.end = true, endComplete
			return st
		}
	}
}

// writeEvent writes and flushes one SSE event under a fresh write deadline.
func (h *Handler) writeEvent(w http.ResponseWriter, rc *http.ResponseController, ev []byte) bool {
	rc.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	_, err := w.Write(ev)
	if err == nil {
		err = rc.Flush()
	}
	return h.wrote(err)
}

// writeKeepalive writes a keepalive comment on an idle event stream.
func (h *Handler) writeKeepalive(w http.ResponseWriter, rc *http.ResponseController) bool {
	if !h.writeEvent(w, rc, []byte(":\n\n")) {
		return false
	}
	h.srv.ReportEvent(server.Event{Kind: server.EventKeepalive, Transport: "http"})
	return true
}

// wrote reports whether a write succeeded, and tells the observers of a
// slow consumer when it failed because its deadline passed: the client
// stopped reading, and its stream is cut off.
func (h *Handler) wrote(err error) bool {
	if err == nil {
		return true
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		h.srv.ReportEvent(server.Event{Kind: server.EventSlowConsumer, Transport: "http"})
	}
	return false
}

func sseEvent(data []byte) []byte {
	ev := make([]byte, 0, len(data)+24)
	ev = append(ev, "event: message\ndata: "...)
	ev = append(ev, data...)
	return append(ev, "\n\n"...)
}

// statusFor is the HTTP status of a JSON-RPC error response. The modern era
// maps protocol errors onto statuses; the legacy era answers every
// JSON-RPC response with 200, as its clients expect.
func statusFor(code int64, modern bool) int {
	if !modern {
		return http.StatusOK
	}
	switch code {
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeInvalidParams,
		mcp.CodeHeaderMismatch, mcp.CodeMissingClientCapability, mcp.CodeUnsupportedVersion:
		return http.StatusBadRequest
	case jsonrpc.CodeInternalError:
		return http.StatusInternalServerError
	case mcp.CodeOverloaded, mcp.CodeRateLimited:
		return http.StatusTooManyRequests
	case mcp.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

// setRetryAfter copies an overload error's retryAfterMs into a Retry-After
// header (whole seconds, rounded up).
func setRetryAfter(w http.ResponseWriter, data []byte) {
	var resp struct {
		Error struct {
			Data mcp.Failure `json:"data"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &resp) != nil || resp.Error.Data.RetryAfterMs <= 0 {
		return
	}
	w.Header().Set("Retry-After", strconv.FormatInt((resp.Error.Data.RetryAfterMs+999)/1000, 10))
}

// overloadedError is the retryable overload error with its failure body.
func overloadedError(msg string, retryAfterMs int64) *jsonrpc.Error {
	data, _ := json.Marshal(mcp.Failure{Code: mcp.FailureOverloaded, Message: msg, Retryable: true, RetryAfterMs: retryAfterMs})
	return &jsonrpc.Error{Code: mcp.CodeOverloaded, Message: msg, Data: data}
}

// writeError answers with a JSON-RPC error body and an HTTP status.
func writeError(w http.ResponseWriter, status int, id jsonrpc.ID, e *jsonrpc.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(jsonrpc.AppendError(nil, id, e))
}

// accepts reports whether the Accept header admits the media type,
// directly or through a wildcard.
func accepts(r *http.Request, mediaType string) bool {
	major, _, _ := strings.Cut(mediaType, "/")
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			if mt == mediaType || mt == "*/*" || mt == major+"/*" {
				return true
			}
		}
	}
	return false
}

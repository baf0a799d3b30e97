package streamhttp

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/server/conn"
	"github.com/mcprel/mcprel/server/outbound"
)

// legacySession is one initialize-era session: its server session, the
// context its requests live in, and the GET stream if one is open.
type legacySession struct {
	id     string
	tenant string
	sess   conn.Session
	ctx    context.Context
	cancel context.CancelCauseFunc
	log    *sessionLog // its streams' resumption log; nil when disabled

	// guarded by Handler.mu
	lastUsed time.Time
	active   int  // POSTs and GET streams being served
	stream   bool // a GET stream is open (resumption disabled; otherwise the log knows)
}

// newSessionID returns 128 random bits in URL-safe base64: visible ASCII,
// unguessable.
func newSessionID() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// initialize opens a legacy session with the initialize request it carries.
func (h *Handler) initialize(w http.ResponseWriter, r *http.Request, m jsonrpc.Message) {
	h.mu.Lock()
	if h.draining || h.srv.Draining() {
		// Checked again under the lock that Shutdown's snapshot takes: a
		// session added after it would never be ended.
		h.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, m.ID, jsonrpc.NewError(mcp.CodeUnavailable, "server shutting down"))
		return
	}
	tenant := server.TenantFrom(r.Context())
	var evicted *legacySession
	switch {
	case h.byTenant[tenant] >= h.opts.MaxSessionsPerTenant:
		// Make room by ending this tenant's longest-idle session, if one
		// has nothing in flight; otherwise this client holds enough.
		if evicted = h.idlestLocked(tenant); evicted == nil {
			h.mu.Unlock()
			w.Header().Set("Retry-After", "10")
			writeError(w, http.StatusTooManyRequests, m.ID, tooManySessions(fmt.Sprintf("this client already holds %d sessions, all busy; end one (DELETE) or retry later", h.opts.MaxSessionsPerTenant)))
			return
		}
		h.removeLocked(evicted)
	case len(h.sessions) >= h.opts.MaxSessions:
		h.mu.Unlock()
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusServiceUnavailable, m.ID, tooManySessions("the server holds as many sessions as it may; retry later"))
		return
	}
	ctx, cancel := context.WithCancelCause(server.WithTenant(context.Background(), tenant))
	id := newSessionID()
	ls := &legacySession{
		id:     id,
		tenant: tenant,
		// The log names the session by the first 8 characters of its id:
		// enough to tell sessions apart and to find the client's, not
		// enough to present it.
		sess:     h.srv.NewSession(conn.Config{Legacy: true, TrackIDs: true, StreamPerRequest: true, Name: id[:8], Transport: "http", QueueCapacity: h.opts.StreamCapacity}),
		ctx:      ctx,
		cancel:   cancel,
		lastUsed: time.Now(),
		active:   1,
	}
	if h.events != nil {
		ls.log = h.events.session(id[:8], tenant, ls.sess)
	}
	h.sessions[ls.id] = ls
	h.byTenant[tenant]++
	h.mu.Unlock()
	if evicted != nil {
		h.srv.Logger().Info("ended an idle legacy session to make room for its tenant's new one", "session", evicted.id[:8])
		h.close(evicted, ErrSessionEnded)
	}
	defer h.done(ls)

	out := outbound.New(h.opts.StreamCapacity)
	defer out.Close()
	ls.sess.Handle(ctx, m, out)
	f, _ := out.TryNext() // initialize is answered before Handle returns
	if f.Kind != outbound.Final || f.ErrorCode != 0 {
		h.end(ls, ErrSessionEnded)
		status := http.StatusBadRequest
		if f.Data == nil {
			status = http.StatusInternalServerError
			f.Data = jsonrpc.AppendError(nil, m.ID, jsonrpc.NewError(jsonrpc.CodeInternalError, "initialize produced no response"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(f.Data)
		return
	}
	w.Header().Set(mcp.HeaderSessionID, ls.id)
	w.Header().Set("Content-Type", "application/json")
	w.Write(f.Data)
}

// lookup finds a live session of tenant and marks it in use; done undoes
// that. Another tenant's session is not found: its id gives nothing away.
func (h *Handler) lookup(id, tenant string) *legacySession {
	h.mu.Lock()
	defer h.mu.Unlock()
	ls := h.sessions[id]
	if ls != nil && ls.tenant != tenant {
		ls = nil
	}
	if ls != nil {
		ls.active++
		ls.lastUsed = time.Now()
	}
	return ls
}

// done marks the end of one use of ls.
func (h *Handler) done(ls *legacySession) {
	h.mu.Lock()
	ls.active--
	ls.lastUsed = time.Now()
	h.mu.Unlock()
}

// end removes a session and cancels what still runs in it.
func (h *Handler) end(ls *legacySession, cause error) {
	h.mu.Lock()
	h.removeLocked(ls)
	h.mu.Unlock()
	h.close(ls, cause)
}

// close cancels what still runs in a removed session and drops its
// streams' resumption log.
func (h *Handler) close(ls *legacySession, cause error) {
	ls.cancel(cause)
	ls.sess.Close(cause)
	if ls.log != nil {
		h.events.dropSession(ls.log)
	}
}

// removeLocked forgets a session, if it is still known.
func (h *Handler) removeLocked(ls *legacySession) {
	if h.sessions[ls.id] != ls {
		return
	}
	delete(h.sessions, ls.id)
	if h.byTenant[ls.tenant]--; h.byTenant[ls.tenant] <= 0 {
		delete(h.byTenant, ls.tenant)
	}
}

// idlestLocked returns the tenant's session unused the longest with
// nothing in flight, or nil.
func (h *Handler) idlestLocked(tenant string) *legacySession {
	var idlest *legacySession
	for _, ls := range h.sessions {
		if ls.tenant != tenant || ls.active > 0 || !ls.sess.Idle() {
			continue
		}
		if idlest == nil || ls.lastUsed.Before(idlest.lastUsed) {
			idlest = ls
		}
	}
	return idlest
}

// tooManySessions is the refusal of an initialize past a session cap:
// the retryable overload, not the shutting-down code.
func tooManySessions(msg string) *jsonrpc.Error { return overloadedError(msg, 10_000) }

// get opens the session's stream for messages not tied to a request, or,
// with Last-Event-ID, resumes the stream that event belongs to.
func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get(mcp.HeaderSessionID)
	if sid == "" {
		// Without a session this is the modern era, which has no GET
		// stream (subscriptions/listen replaces it) and no resumption: a
		// Last-Event-ID changes nothing.
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "GET needs an %s; protocol version %s has no GET stream", mcp.HeaderSessionID, mcp.Version20260728))
		return
	}
	if !accepts(r, "text/event-stream") {
		writeError(w, http.StatusNotAcceptable, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Accept must list text/event-stream"))
		return
	}
	ls := h.lookup(sid, server.TenantFrom(r.Context()))
	if ls == nil {
		writeError(w, http.StatusNotFound, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "session not found"))
		return
	}
	defer h.done(ls)
	if ls.log == nil {
		h.getUnlogged(w, r, ls)
		return
	}
	if last := r.Header.Get(mcp.HeaderLastEventID); last != "" {
		h.resume(w, r, ls, last)
		return
	}
	out := outbound.New(h.opts.StreamCapacity)
	s, c, busy := h.events.openGet(ls.log, out)
	switch {
	case busy:
		out.Close()
		writeError(w, http.StatusConflict, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "this session already has a GET stream open"))
		return
	case s == nil: // the session ended meanwhile
		out.Close()
		writeError(w, http.StatusNotFound, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "session not found"))
		return
	}
	rc := http.NewResponseController(w)
	st := h.writeSSE(w, r, rc, out, &resumable{log: h.events, s: s, c: c, prime: primes(ls.sess)})
	// A drainer keeps the stream's log until a resume, its TTL, or the
	// session's end, which closes out.
	h.events.detach(s, c, out)
	h.srv.Logger().Debug("stream", "method", "GET", "sse", true, "frames", st.frames, "end", st.end, "event_stream", s.key)
}

// getUnlogged serves the GET stream when resumption is disabled: no event
// ids, and what is sent while no GET stream is open is dropped.
func (h *Handler) getUnlogged(w http.ResponseWriter, r *http.Request, ls *legacySession) {
	h.mu.Lock()
	busy := ls.stream
	ls.stream = true
	h.mu.Unlock()
	if busy {
		writeError(w, http.StatusConflict, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "this session already has a GET stream open"))
		return
	}
	defer func() {
		h.mu.Lock()
		ls.stream = false
		h.mu.Unlock()
	}()

	out := outbound.New(h.opts.StreamCapacity)
	ls.sess.SetNotifyQueue(out)
	defer ls.sess.SetNotifyQueue(nil)
	go func() { // end the stream when the session ends
		select {
		case <-ls.ctx.Done():
			out.Close()
		case <-r.Context().Done():
		}
	}()
	rc := http.NewResponseController(w)
	st := h.writeSSE(w, r, rc, out, nil)
	h.srv.Logger().Debug("stream", "method", "GET", "sse", true, "frames", st.frames, "end", st.end)
}

// delete ends a session at the client's request.
func (h *Handler) delete(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get(mcp.HeaderSessionID)
	if sid == "" {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "DELETE needs an %s", mcp.HeaderSessionID))
		return
	}
	ls := h.lookup(sid, server.TenantFrom(r.Context()))
	if ls == nil {
		writeError(w, http.StatusNotFound, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "session not found"))
		return
	}
	h.done(ls)
	h.end(ls, ErrSessionEnded)
	w.WriteHeader(http.StatusOK)
}

// janitor ends sessions left idle past SessionIdleTimeout, and every
// session once the server has shut down (server.Server.Shutdown).
func (h *Handler) janitor() {
	tick := time.NewTicker(max(h.opts.SessionIdleTimeout/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-h.srv.Stopped():
			h.mu.Lock()
			h.draining = true
			all := make([]*legacySession, 0, len(h.sessions))
			for _, ls := range h.sessions {
				all = append(all, ls)
			}
			h.mu.Unlock()
			for _, ls := range all {
				h.end(ls, server.ErrShutdown)
			}
			return
		case now := <-tick.C:
			h.mu.Lock()
			var idle []*legacySession
			for _, ls := range h.sessions {
				if ls.active == 0 && now.Sub(ls.lastUsed) > h.opts.SessionIdleTimeout {
					idle = append(idle, ls)
				}
			}
			h.mu.Unlock()
			for _, ls := range idle {
				h.end(ls, ErrSessionEnded)
			}
		}
	}
}

func (h *Handler) isDraining() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.draining || h.srv.Draining()
}

// Shutdown stops taking new requests (they get 503), ends subscriptions,
// lets running calls finish until ctx ends and then cancels the rest, and
// ends every session. Call it before http.Server.Shutdown, which then finds
// the streams finished.
func (h *Handler) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.draining = true
	sessions := make([]*legacySession, 0, len(h.sessions))
	for _, ls := range h.sessions {
		sessions = append(sessions, ls)
	}
	h.mu.Unlock()
	h.stopOnce.Do(func() { close(h.stop) })

	err := h.stateless.Shutdown(ctx)
	for _, ls := range sessions {
		if serr := ls.sess.Shutdown(ctx); serr != nil && err == nil {
			err = serr
		}
		h.end(ls, server.ErrShutdown)
	}
	return err
}

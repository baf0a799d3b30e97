package probe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/review"
)

// httpPeer is a Streamable HTTP server spoken to in one era: stateless
// requests in the 2026-07-28 era, one session in the 2025 era.
type httpPeer struct {
	t       *Target
	hc      *http.Client
	era     mcp.Era
	rec     *recorder
	session string // 2025: the session's id
	next    atomic.Int64
	// headerWait bounds the wait for a response's headers.
	headerWait time.Duration
}

// newHTTP opens a peer of era on t; the 2025 era's handshake is made
// here, on a session of its own.
func newHTTP(ctx context.Context, t *Target, era mcp.Era, rec *recorder, timeout time.Duration) (*httpPeer, error) {
	p := &httpPeer{t: t, era: era, rec: rec, headerWait: timeout,
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}, CheckRedirect: noRedirect}}
	p.next.Store(1)
	if era == mcp.Legacy {
		s, err := p.post(ctx, requestFrame(1, mcp.MethodInitialize, initializeParams()), mcp.MethodInitialize, "", nil)
		if err != nil {
			return nil, err
		}
		m, _, ok := s.box.wait(ctx, 0, timeout, func(m inbound) bool { return m.isResponseTo(1) })
		s.close()
		if !ok && s.status >= 300 {
			return nil, fmt.Errorf("the server answered initialize with %s%s", s.httpStatus(), bodyNote(s.body))
		}
		if !ok {
			return nil, fmt.Errorf("the server did not answer initialize within %v (%s)", timeout, s.httpStatus())
		}
		if m.msg.Error != nil {
			return nil, fmt.Errorf("the server refused initialize: %s", m.msg.Error.Message)
		}
		p.session = s.header.Get(mcp.HeaderSessionID)
		n, err := p.post(ctx, requestFrame(-1, mcp.NotificationInitialized, nil), mcp.NotificationInitialized, "", nil)
		if err != nil {
			return nil, err
		}
		n.close()
	}
	return p, nil
}

// noRedirect is the probe's http.Client's CheckRedirect: it follows no
// redirect. A redirect would carry the request's body and headers (the
// target's bearer token among them) to another address, and that
// address's answer would be taken for the server's; the 3xx is the answer,
// reported as a redirect that says where it pointed.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// stream is one HTTP response: a JSON body (one message) or an SSE
// stream (one message per event), read as it comes.
type stream struct {
	status   int
	header   http.Header
	redirect string // a 3xx response's Location, resolved: where it pointed
	box      *mailbox
	started  time.Time // the request was sent
	headers  time.Time // its response's headers came
	firstAt  time.Time // its first event (or body) came
	mu       sync.Mutex
	lastID   string    // the last event id it carried
	comment  time.Time // its first comment (a keepalive) came
	cancel   context.CancelFunc
	done     chan struct{}
	body     []byte // the start of a body that is no JSON-RPC message (an error page), at most maxBodyKept

	gmu  sync.Mutex
	gate chan struct{} // while not nil, the reader waits for it: the probe stopped reading
}

// pause stops reading the stream (a slow consumer); resume reads on.
func (s *stream) pause() {
	s.gmu.Lock()
	if s.gate == nil {
		s.gate = make(chan struct{})
	}
	s.gmu.Unlock()
}

func (s *stream) resume() {
	s.gmu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.gmu.Unlock()
}

// wait blocks while the stream is paused, or until it is closed.
func (s *stream) waitGate(ctx context.Context) {
	s.gmu.Lock()
	gate := s.gate
	s.gmu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
}

// httpStatus is the response's status for a report: a redirect says
// where it pointed.
func (s *stream) httpStatus() string {
	if s.status >= 300 && s.status < 400 {
		to := s.redirect
		if to == "" {
			to = "nowhere (no Location)"
		}
		return fmt.Sprintf("HTTP %d, a redirect to %s, which the probe does not follow", s.status, to)
	}
	return fmt.Sprintf("HTTP %d", s.status)
}

// sse reports whether the response is an event stream.
func (s *stream) sse() bool {
	return strings.HasPrefix(s.header.Get("Content-Type"), "text/event-stream")
}

// close drops the response: the stream is closed by the client.
func (s *stream) close() {
	s.resume()
	s.cancel()
	<-s.done
}

// ended waits up to d for the response to end, and reports whether it
// did; one that did not is closed: a response that never ends is not
// waited for.
func (s *stream) ended(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.done:
		return true
	case <-t.C:
		s.close()
		return false
	}
}

// endless is the error of a response that did not end within d.
func (s *stream) endless(what string, d time.Duration) error {
	return fmt.Errorf("the server's response to %s did not end within %v (%s %s)", what, d, s.httpStatus(), s.header.Get("Content-Type"))
}

// lastEventID is the last event id the stream carried.
func (s *stream) lastEventID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastID
}

// keepalive is when the stream's first comment line (a keepalive) came;
// false while none has.
func (s *stream) keepalive() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.comment, !s.comment.IsZero()
}

// headerFor is the Mcp-Name a 2026-07-28 request carries for its method.
func nameOf(method string, members map[string]any) string {
	key := map[string]string{mcp.MethodToolsCall: "name", mcp.MethodPromptsGet: "name", mcp.MethodResourcesRead: "uri",
		"tasks/get": "taskId", "tasks/cancel": "taskId", "tasks/update": "taskId"}[method]
	if key == "" {
		return ""
	}
	s, _ := members[key].(string)
	return s
}

// post sends frame and starts reading its response.
func (p *httpPeer) post(ctx context.Context, frame []byte, method, name string, extra map[string]string) (*stream, error) {
	h := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	switch p.era {
	case mcp.Modern:
		h[mcp.HeaderProtocolVersion] = mcp.Version20260728
		h[mcp.HeaderMethod] = method
		if name != "" {
			h[mcp.HeaderName] = name
		}
	case mcp.Legacy:
		if method != mcp.MethodInitialize {
			h[mcp.HeaderProtocolVersion] = mcp.Version20251125
		}
		if p.session != "" {
			h[mcp.HeaderSessionID] = p.session
		}
	}
	for k, v := range extra {
		h[k] = v
	}
	p.rec.add("sent", frame)
	return p.do(ctx, http.MethodPost, bytes.NewReader(frame), h)
}

// get opens the 2025 era's standalone stream (or resumes one).
func (p *httpPeer) get(ctx context.Context, extra map[string]string) (*stream, error) {
	h := map[string]string{"Accept": "text/event-stream", mcp.HeaderProtocolVersion: mcp.Version20251125}
	if p.session != "" {
		h[mcp.HeaderSessionID] = p.session
	}
	for k, v := range extra {
		h[k] = v
	}
	p.rec.note("GET %s %v", p.t.URL, extra)
	return p.do(ctx, http.MethodGet, nil, h)
}

func (p *httpPeer) do(ctx context.Context, method string, body io.Reader, h map[string]string) (*stream, error) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	req, err := http.NewRequestWithContext(rctx, method, p.t.URL, body)
	if err != nil {
		cancel()
		return nil, err
	}
	for k, v := range p.t.Header {
		req.Header[k] = v
	}
	for k, v := range h {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	if host, ok := h["Host"]; ok {
		req.Host = host
	}
	s := &stream{box: newMailbox(), started: time.Now(), cancel: cancel, done: make(chan struct{})}
	late := time.AfterFunc(p.headerWait, cancel) // no headers in time: given up
	resp, err := p.hc.Do(req)
	if !late.Stop() {
		if err == nil {
			resp.Body.Close()
		}
		return nil, fmt.Errorf("the server sent no response headers within %v", p.headerWait)
	}
	if err != nil {
		cancel()
		p.rec.suspect("a "+method, fmt.Sprintf("could not be sent (%v)", err))
		return nil, &UnreachableError{Target: p.t.String(), Err: err}
	}
	s.status, s.header, s.headers = resp.StatusCode, resp.Header, time.Now()
	if loc, err := resp.Location(); err == nil && resp.StatusCode >= 300 && resp.StatusCode < 400 {
		s.redirect = loc.String()
	}
	p.rec.note("%s %s", s.httpStatus(), resp.Header.Get("Content-Type"))
	go s.read(rctx, resp.Body, p.rec)
	return s, nil
}

// cut tells the run, when a response was cut (err) other than by the
// probe or for its length, that the server may have died; it returns once
// the run knows.
func (s *stream) cut(ctx context.Context, err error, rec *recorder) {
	var tl *tooLong
	if err == io.EOF || ctx.Err() != nil || errors.As(err, &tl) {
		return
	}
	rec.suspect(fmt.Sprintf("a response (HTTP %d %s)", s.status, s.header.Get("Content-Type")), fmt.Sprintf("was cut (%v)", err))
}

// maxBodyKept is how much of a body that is no JSON-RPC message a
// stream keeps, for a report.
const maxBodyKept = 4 << 10

func (s *stream) read(ctx context.Context, body io.ReadCloser, rec *recorder) {
	defer close(s.done)
	defer body.Close()
	if !s.sse() {
		data, err := io.ReadAll(io.LimitReader(body, maxMessage+1))
		if err == nil {
			err = io.EOF
		}
		if len(data) > maxMessage {
			data, err = data[:maxBodyKept], errTooLong("a response body")
		}
		if data = bytes.TrimSpace(data); len(data) > 0 {
			s.mu.Lock()
			s.firstAt = time.Now()
			s.mu.Unlock()
			rec.add("received", data)
			if msg, derr := jsonrpc.Decode(data); derr == nil && err == io.EOF {
				s.box.put(inbound{msg: msg, raw: data, at: time.Now()})
			} else {
				s.body = bytes.Clone(data[:min(len(data), maxBodyKept)])
			}
		}
		s.cut(ctx, err, rec)
		s.box.end(err)
		return
	}
	br := bufio.NewReaderSize(body, 4<<10)
	var data []byte // the event being read: its data lines, at most maxMessage
	for {
		s.waitGate(ctx)
		line, err := readLine(br)
		text := strings.TrimRight(string(line), "\r\n")
		switch {
		case text == "" && len(line) > 0:
			if len(data) > 0 {
				s.mu.Lock()
				if s.firstAt.IsZero() {
					s.firstAt = time.Now()
				}
				s.mu.Unlock()
				rec.add("received", data)
				raw := bytes.Clone(data)
				if msg, derr := jsonrpc.Decode(raw); derr == nil {
					s.box.put(inbound{msg: msg, raw: raw, at: time.Now()})
				}
				if data = data[:0]; cap(data) > 64<<10 {
					data = nil // a large event's buffer is not held for the next
				}
			}
		case strings.HasPrefix(text, ":"):
			s.mu.Lock()
			if s.comment.IsZero() {
				s.comment = time.Now()
			}
			s.mu.Unlock()
		case strings.HasPrefix(text, "data:"):
			more := strings.TrimPrefix(strings.TrimPrefix(text, "data:"), " ")
			if len(data)+1+len(more) > maxMessage {
				err = errTooLong("an event")
				break
			}
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, more...)
		case strings.HasPrefix(text, "id:"):
			s.mu.Lock()
			s.lastID = strings.TrimSpace(strings.TrimPrefix(text, "id:"))
			s.mu.Unlock()
		}
		if err != nil {
			s.cut(ctx, err, rec)
			s.box.end(err)
			return
		}
	}
}

// request sends a request in the peer's era and returns its id and
// response stream.
func (p *httpPeer) request(ctx context.Context, method string, members map[string]any, token string, caps map[string]any) (int64, *stream, error) {
	id := p.next.Add(1)
	s, err := p.post(ctx, requestFrame(id, method, params(p.era, members, token, caps)), method, nameOf(method, members), nil)
	return id, s, err
}

// callTool starts a tools/call of op with args, asking for progress
// under token.
func (p *httpPeer) callTool(ctx context.Context, op *review.Operation, args map[string]any, token string) (*call, error) {
	id, s, err := p.request(ctx, mcp.MethodToolsCall, toolCall(op, args), token, nil)
	if err != nil {
		return nil, err
	}
	return &call{id: id, token: token, box: s.box, s: s}, nil
}

// call sends a request and waits for its response.
func (p *httpPeer) call(ctx context.Context, method string, members map[string]any, timeout time.Duration) (inbound, error) {
	return p.callWith(ctx, method, members, nil, timeout)
}

func (p *httpPeer) callWith(ctx context.Context, method string, members, caps map[string]any, timeout time.Duration) (inbound, error) {
	id, s, err := p.request(ctx, method, members, "", caps)
	if err != nil {
		return inbound{}, err
	}
	defer s.close()
	m, _, ok := s.box.wait(ctx, 0, timeout, func(m inbound) bool { return m.isResponseTo(id) })
	if !ok {
		s.close() // its body, if any, is read whole
		if s.status >= 300 {
			return inbound{}, fmt.Errorf("the server answered %s with %s%s", method, s.httpStatus(), bodyNote(s.body))
		}
		return inbound{}, fmt.Errorf("the server did not answer %s within %v", method, timeout)
	}
	return m, nil
}

func bodyNote(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	if len(b) > 200 {
		b = b[:200]
	}
	return ": " + string(b)
}

// notify POSTs a notification and returns the HTTP status it got.
func (p *httpPeer) notify(ctx context.Context, method string, params any) (int, []byte, error) {
	s, err := p.post(ctx, requestFrame(-1, method, params), method, "", nil)
	if err != nil {
		return 0, nil, err
	}
	if !s.ended(p.headerWait) {
		return s.status, nil, s.endless(method, p.headerWait)
	}
	var body []byte
	for _, m := range s.box.since(0) {
		body = m.raw
	}
	if body == nil {
		body = s.body
	}
	return s.status, body, nil
}

// close ends a 2025 session (DELETE), as a client that is done does.
func (p *httpPeer) close(ctx context.Context) {
	if p.session != "" {
		if s, err := p.do(ctx, http.MethodDelete, nil, map[string]string{mcp.HeaderSessionID: p.session,
			mcp.HeaderProtocolVersion: mcp.Version20251125}); err == nil {
			s.close()
		}
	}
	p.hc.CloseIdleConnections()
}

// rawJSON is v as JSON text, for a report.
func rawJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

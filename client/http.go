package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
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
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}
	}
	stats := &counters{}
	t := &httpTransport{url: url, hc: hc, opts: o, stats: stats}
	return newClient(ctx, t, o, stats)
}

// StatusError is an HTTP answer that carried no JSON-RPC response: a
// proxy's error page, a 404 for a session that ended, a 405.
type StatusError struct {
	Status int
	Body   string // its start, for the message
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

	mu      sync.Mutex
	session string // the 2025 session id, once initialize gave one
	version string // the 2025 protocol version, once negotiated
}

func (t *httpTransport) initialized(version string) {
	t.mu.Lock()
	t.version = version
	t.mu.Unlock()
}

// header sets the headers every request of the era carries.
func (t *httpTransport) header(h http.Header, era mcp.Era, version, method, name string) {
	for k, v := range t.opts.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if era == mcp.Modern {
		h.Set("MCP-Protocol-Version", version)
		h.Set("Mcp-Method", method)
		if name != "" {
			h.Set("Mcp-Name", name)
		}
		return
	}
	t.mu.Lock()
	session, v := t.session, t.version
	t.mu.Unlock()
	if session != "" {
		h.Set("Mcp-Session-Id", session)
	}
	if v != "" {
		h.Set("MCP-Protocol-Version", v)
	}
}

func (t *httpTransport) start(ctx context.Context, req outgoing) (*exchange, error) {
	ex := newExchange(t.stats)
	// The request lives until the call ends, not with the caller's ctx:
	// the call decides when to give up, and how to say so.
	reqCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	hreq, err := http.NewRequestWithContext(reqCtx, http.MethodPost, t.url, bytes.NewReader(jsonrpc.AppendRequest(nil, req.id, req.method, req.params)))
	if err != nil {
		abort()
		return nil, err
	}
	t.header(hreq.Header, req.era, req.version, req.method, req.name)
	ex.onFinish = abort
	ex.onCancel = func(id jsonrpc.ID, reason string) {
		if req.era != mcp.Modern {
			// 2025: disconnecting is not cancellation; say it with a POST.
			params, _ := json.Marshal(mcp.CancelledParams{RequestID: id, Reason: reason})
			nctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			t.post(nctx, jsonrpc.AppendNotification(nil, mcp.NotificationCancelled, params), req.era, mcp.NotificationCancelled)
			cancel()
		}
		// 2026: closing the request's stream is the cancellation.
		abort()
	}
	go t.exchange(hreq, req, ex)
	return ex, nil
}

// exchange sends the request and reads its answer onto ex.
func (t *httpTransport) exchange(hreq *http.Request, req outgoing, ex *exchange) {
	resp, err := t.hc.Do(hreq)
	if err != nil {
		if hreq.Context().Err() == nil {
			ex.response <- reply{err: fmt.Errorf("%w: %v", ErrConnectionLost, err)}
		}
		return
	}
	defer resp.Body.Close()
	if req.method == mcp.MethodInitialize {
		if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
			t.mu.Lock()
			t.session = sid
			t.mu.Unlock()
		}
	}
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case media == "text/event-stream" && resp.StatusCode == http.StatusOK:
		t.readEvents(resp.Body, req, ex)
	case media == "application/json":
		body, err := io.ReadAll(io.LimitReader(resp.Body, int64(t.opts.MaxMessageBytes)+1))
		if err != nil {
			if hreq.Context().Err() == nil {
				ex.response <- reply{err: fmt.Errorf("%w: %v", ErrConnectionLost, err)}
			}
			return
		}
		m, derr := jsonrpc.Decode(body)
		if derr != nil || m.Kind != jsonrpc.KindResponse {
			ex.response <- reply{err: &StatusError{Status: resp.StatusCode, Body: clip(body)}}
			return
		}
		ex.response <- reply{m: m}
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		ex.response <- reply{err: &StatusError{Status: resp.StatusCode, Body: strings.TrimSpace(clip(body))}}
	}
}

// readEvents reads an SSE stream: this request's progress and its
// response; anything else the server sends on it is logged and skipped.
func (t *httpTransport) readEvents(body io.Reader, req outgoing, ex *exchange) {
	r := bufio.NewReaderSize(body, 64<<10)
	var data []byte
	for {
		line, err := readLine(r, t.opts.MaxMessageBytes)
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0 && err == nil:
			if len(data) > 0 {
				if t.event(data, req, ex) {
					return
				}
				data = nil
			}
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, d...)
		}
		if err != nil {
			if len(data) > 0 && t.event(data, req, ex) {
				return
			}
			close(ex.response) // the stream ended without the response
			return
		}
	}
}

// event handles one SSE event's data; true once the response arrived.
func (t *httpTransport) event(data []byte, req outgoing, ex *exchange) bool {
	m, derr := jsonrpc.Decode(data)
	if derr != nil {
		t.opts.Logger.Warn("the server sent an event that is not JSON-RPC", "err", derr.Message)
		return false
	}
	switch m.Kind {
	case jsonrpc.KindResponse:
		if m.ID == req.id {
			ex.response <- reply{m: m}
			return true
		}
	case jsonrpc.KindNotification:
		if m.Method == mcp.NotificationProgress {
			if token, p, ok := progressOf(m.Params); ok && token == req.token {
				ex.deliverProgress(p)
			}
		}
	case jsonrpc.KindRequest:
		t.opts.Logger.Debug("the server sent a request this client does not serve", "method", m.Method)
	}
	return false
}

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
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return &StatusError{Status: resp.StatusCode}
	}
	return nil
}

func (t *httpTransport) notify(ctx context.Context, method string, params any, era mcp.Era) error {
	var raw json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return err
		}
		raw = b
	}
	return t.post(ctx, jsonrpc.AppendNotification(nil, method, raw), era, method)
}

// close deletes a 2025 session and releases idle connections.
func (t *httpTransport) close(grace time.Duration) error {
	t.mu.Lock()
	session := t.session
	t.mu.Unlock()
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
	return nil
}

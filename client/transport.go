package client

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// transport is one way of reaching a server: stdio or Streamable HTTP.
type transport interface {
	// start sends a request; what the server sends for it arrives on the
	// exchange.
	start(ctx context.Context, req outgoing) (*exchange, error)
	// notify sends a notification.
	notify(ctx context.Context, method string, params any, era mcp.Era) error
	// initialized tells the transport the 2025 handshake chose version,
	// before notifications/initialized (which carries it) is sent.
	initialized(version string)
	// ready returns once what the server sends unasked can reach the
	// client, or after wait at the latest.
	ready(ctx context.Context, wait time.Duration)
	// close ends the connection, waiting up to grace at each step.
	close(grace time.Duration) error
	// done is closed when the connection ends: a stdio server's output,
	// an HTTP+SSE stream; over Streamable HTTP, which holds no standing
	// connection, when it is closed.
	done() <-chan struct{}
}

// outgoing is one request to send.
type outgoing struct {
	id      jsonrpc.ID
	method  string
	name    string // the Mcp-Name header's value (2026-07-28 HTTP)
	params  json.RawMessage
	era     mcp.Era
	version string
	token   string // its progress token
	// headers are the Mcp-Param-* headers of a 2026-07-28 HTTP
	// tools/call: name and encoded value.
	headers [][2]string
	// notes, when set, receives the request's other notifications (a
	// listen stream's, a log message on its response stream); it must
	// not block. onNote, when set, receives them in its stead
	// (CallOptions.OnNotification, taken as it is).
	notes  func(jsonrpc.Message)
	onNote func(method string, params json.RawMessage)
	// onRequest, when set, answers the server's requests the transport
	// attributes to this request (CallOptions.OnRequest).
	onRequest RequestHandler
}

// progressBuffer bounds the progress reports waiting for a slow caller:
// past it the oldest are dropped (deliverProgress), so the caller skips
// values but never misses the newest. Every call that asks for progress
// allocates it whole, reports or not (a gateway asks on every call), so
// it is kept small: a caller that falls eight reports behind would only
// skip more of them with a longer queue.
const progressBuffer = 8

// notesBuffer bounds the notifications a listen stream holds for a slow
// OnNotification; past it they are dropped, and the next refetch covers
// them.
const notesBuffer = 64

// exchange is one request in flight: its progress reports and its
// response, and the way to give up on it.
type exchange struct {
	progress chan Progress
	// response is closed once the request ended: r is its response (or
	// its transport's failure), unless lost, when the connection ended
	// first (result).
	response chan struct{}
	r        reply
	lost     bool
	stats    *counters
	token    string
	notes    func(jsonrpc.Message)
	onNote   func(method string, params json.RawMessage)

	once sync.Once
	// owner, when set, releases and cancels the exchange (a stdio
	// request: the transport, with the request's id and queued frame
	// kept here rather than in closures of its own); otherwise onFinish
	// and onCancel do.
	owner    exchangeOwner
	id       jsonrpc.ID
	frame    *frame
	onCancel func(id jsonrpc.ID, reason string) Cancellation // the transport's and era's signal
	onFinish func()

	ended sync.Once // the response is delivered, or the connection lost, once

	// The server's requests attributed to this call: answered by
	// onRequest under ctx (the call's clocks). While one is being
	// answered the call's idle clock waits (asking), and it starts again
	// once the answer is given (answered).
	ctx       context.Context
	onRequest RequestHandler
	asking    atomic.Int32
	answered  chan struct{}
}

// exchangeOwner releases (finished) and cancels (cancelled) the exchanges
// that name it: the transport that started them.
type exchangeOwner interface {
	finished(ex *exchange)
	cancelled(ex *exchange, id jsonrpc.ID, reason string) Cancellation
}

// deliver hands the call its response (or its transport failure), once:
// a second answer for the same id is dropped.
func (ex *exchange) deliver(r reply) {
	ex.ended.Do(func() {
		ex.r = r
		close(ex.response)
	})
}

// lose ends the call without a response: its connection is gone.
func (ex *exchange) lose() {
	ex.ended.Do(func() {
		ex.lost = true
		close(ex.response)
	})
}

// result is how the request ended, once response is closed: its reply,
// and false when the connection ended first.
func (ex *exchange) result() (reply, bool) { return ex.r, !ex.lost }

// takesNotes reports whether the request takes its other notifications.
func (ex *exchange) takesNotes() bool { return ex.notes != nil || ex.onNote != nil }

// note hands the request one of its other notifications.
func (ex *exchange) note(m jsonrpc.Message) {
	if ex.onNote != nil {
		ex.onNote(m.Method, m.Params)
		return
	}
	ex.notes(m)
}

func newExchange(ctx context.Context, req outgoing, stats *counters) *exchange {
	ex := &exchange{response: make(chan struct{}), stats: stats,
		token: req.token, notes: req.notes, onNote: req.onNote, ctx: ctx, onRequest: req.onRequest}
	if req.token != "" {
		// Without a progress token no report is routed to the call: a
		// nil channel, never ready, costs nothing.
		ex.progress = make(chan Progress, progressBuffer)
	}
	if req.onRequest != nil {
		ex.answered = make(chan struct{}, 1)
	}
	return ex
}

// answerer is who answers a request of the server's: the call it is
// attributed to (ex, when it has a handler of its own), under that call's
// clocks, which wait while it answers; otherwise the connection's
// handler, under answerTimeout from parent.
type answerer struct {
	h    RequestHandler
	ctx  context.Context
	ex   *exchange // the call answering, or nil
	stop context.CancelFunc
}

func answererFor(ex *exchange, conn RequestHandler, parent context.Context) *answerer {
	if ex != nil && ex.onRequest != nil {
		ctx, cancel := context.WithCancel(ex.ctx)
		ex.asking.Add(1)
		return &answerer{h: ex.onRequest, ctx: ctx, ex: ex, stop: cancel}
	}
	ctx, cancel := context.WithTimeout(parent, answerTimeout)
	return &answerer{h: conn, ctx: ctx, stop: cancel}
}

// answer runs the handler on m and returns the response to send, or nil
// when there is none to send: the call the request was attributed to
// ended while it was being answered, and its cancellation (or its
// result) is all the server needs.
func (a *answerer) answer(m jsonrpc.Message) []byte {
	b := serveRequest(a.ctx, a.h, m)
	if a.ex != nil && a.ctx.Err() != nil {
		return nil
	}
	return b
}

// done must be called once the answer is given (or dropped).
func (a *answerer) done() {
	a.stop()
	if ex := a.ex; ex != nil {
		// Told before the count drops, so that a call whose idle clock
		// fires in between finds the answer (roundTrip).
		select {
		case ex.answered <- struct{}{}:
		default:
		}
		ex.asking.Add(-1)
	}
}

// reply is how a request ended: its response, or a failure of the
// transport that says more than a lost connection (an HTTP status).
type reply struct {
	m   jsonrpc.Message
	err error
}

// deliverProgress hands a report to the caller without ever blocking the
// transport's reader. When the caller has progressBuffer reports still to
// take, the oldest gives way: a slow callback skips values, and still
// sees the last one the server reported. (The reader is the only sender,
// so a report taken out here is room for this one.)
func (ex *exchange) deliverProgress(p Progress) {
	if ex.progress == nil { // the call asked for none: nothing takes it
		ex.stats.dropped.Add(1)
		return
	}
	for {
		select {
		case ex.progress <- p:
			return
		default:
		}
		select {
		case <-ex.progress:
			ex.stats.dropped.Add(1)
		default:
		}
	}
}

// cancel sends the cancellation signal, once, and releases the exchange;
// it reports what became of the signal (CancelNotRecorded when the
// exchange was already released).
func (ex *exchange) cancel(id jsonrpc.ID, reason string) Cancellation {
	c := CancelNotRecorded
	ex.once.Do(func() {
		switch {
		case ex.owner != nil:
			c = ex.owner.cancelled(ex, id, reason)
		case ex.onCancel != nil:
			c = ex.onCancel(id, reason)
		}
	})
	return c
}

// finish releases an exchange whose response arrived.
func (ex *exchange) finish() {
	ex.once.Do(func() {
		switch {
		case ex.owner != nil:
			ex.owner.finished(ex)
		case ex.onFinish != nil:
			ex.onFinish()
		}
	})
}

// progressWire is notifications/progress as the client reads it: a
// token it issued is always a string.
type progressWire struct {
	ProgressToken json.RawMessage `json:"progressToken"`
	Progress      float64         `json:"progress"`
	Total         *float64        `json:"total"`
	Message       string          `json:"message"`
}

// progressOf decodes a notifications/progress and its token; false when
// it is malformed or its token is not a string.
func progressOf(params json.RawMessage) (string, Progress, bool) {
	var p progressWire
	var token string
	if json.Unmarshal(params, &p) != nil || json.Unmarshal(p.ProgressToken, &token) != nil {
		return "", Progress{}, false
	}
	return token, Progress{Progress: p.Progress, Total: p.Total, Message: p.Message}, true
}

// notification encodes a notification frame; nil params are left out.
func notification(method string, params any) ([]byte, error) {
	var raw json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	return jsonrpc.AppendNotification(nil, method, raw), nil
}

// maxAbandoned bounds how many given-up ids a connection remembers to
// recognise their late responses.
const maxAbandoned = 1024

// inflight is the calls a connection's one reader answers (stdio, an
// HTTP+SSE stream): responses go by id, progress by token, and the ids
// given up on are remembered, the last maxAbandoned of them, so that a
// late response is counted rather than taken for one never asked for.
type inflight struct {
	mu        sync.Mutex
	pending   map[jsonrpc.ID]*exchange
	byToken   map[string]*exchange
	abandoned map[jsonrpc.ID]bool
	order     []jsonrpc.ID // abandoned ids, oldest first
	dead      bool         // the connection is lost: no more calls
	gaveUp    time.Time    // when a call was last given up (see sole)
}

func newInflight() *inflight {
	return &inflight{pending: map[jsonrpc.ID]*exchange{}, byToken: map[string]*exchange{}, abandoned: map[jsonrpc.ID]bool{}}
}

// add registers a call; false once the connection is lost.
func (f *inflight) add(req outgoing, ex *exchange) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead {
		return false
	}
	f.pending[req.id] = ex
	if req.token != "" {
		f.byToken[req.token] = ex
	}
	return true
}

// forget drops a call; abandon remembers its id, given up on.
func (f *inflight) forget(id jsonrpc.ID, token string, abandon bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pending, id)
	delete(f.byToken, token)
	if abandon {
		f.gaveUp = time.Now()
		f.abandoned[id] = true
		f.order = append(f.order, id)
		if len(f.order) > maxAbandoned {
			delete(f.abandoned, f.order[0])
			f.order = f.order[1:]
		}
	}
}

// call is the call of id in flight, or nil.
func (f *inflight) call(id jsonrpc.ID) *exchange {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending[id]
}

// sole is the one call in flight, or nil when there are none or several,
// or a call was given up within attributionGrace: a transport that
// carries nothing to say which call a server's request belongs to
// (stdio, HTTP+SSE) attributes it only then.
func (f *inflight) sole() *exchange {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.gaveUp) < attributionGrace {
		return nil
	}
	return soleOf(f.pending)
}

// soleOf is the one exchange of pending, or nil when there are none or
// several.
func soleOf(pending map[jsonrpc.ID]*exchange) *exchange {
	if len(pending) != 1 {
		return nil
	}
	for _, ex := range pending {
		return ex
	}
	return nil
}

// progress is the call that issued token, or nil.
func (f *inflight) progress(token string) *exchange {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byToken[token]
}

// respond ends the call id with r, once: a second answer for the same id
// is one never asked for, and an answer to a call given up on is late,
// counted and dropped.
func (f *inflight) respond(id jsonrpc.ID, r reply, stats *counters, log *slog.Logger) {
	f.mu.Lock()
	ex := f.pending[id]
	late := f.abandoned[id]
	delete(f.abandoned, id)
	if ex != nil {
		delete(f.pending, id)
		delete(f.byToken, ex.token)
	}
	f.mu.Unlock()
	switch {
	case ex != nil:
		ex.deliver(r)
	case late:
		stats.late.Add(1)
		log.Debug("ignored a response to a call the client gave up on", "id", id)
	default:
		log.Warn("the server answered a request the client never sent", "id", id)
	}
}

// lose marks the connection lost and ends every call in flight with
// ErrConnectionLost.
func (f *inflight) lose() {
	f.mu.Lock()
	f.dead = true
	pending := f.pending
	f.pending, f.byToken = map[jsonrpc.ID]*exchange{}, map[string]*exchange{}
	f.mu.Unlock()
	for _, ex := range pending {
		ex.lose()
	}
}

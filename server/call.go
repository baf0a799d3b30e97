package server

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// requestInfo builds the part of a handler's request every kind shares.
// scope names what an input_required state is bound to (method and tool,
// prompt or resource); empty for requests that cannot ask for input. The
// state is bound to the request's tenant and to args, the JSON of its
// arguments, too: a state issued for one tenant or one set of arguments
// is refused for another. It fails the request and returns false when a
// retry's state does not verify.
func (ss *Session) requestInfo(r *inflight, in *incoming, scope string, args []byte) (Request, bool) {
	q := ss.baseRequest(r, in)
	return q, ss.verifyRetry(r, in, &q, scope, args)
}

// baseRequest is what a handler knows of every request: who sent it, in
// which era, with which capabilities.
func (ss *Session) baseRequest(r *inflight, in *incoming) Request {
	q := Request{ID: r.id, Meta: in.rawMeta, KnownMeta: in.meta, Era: r.era, Tenant: TenantFrom(in.ctx), r: r}
	r.tenant = q.Tenant
	if r.era == mcp.Modern {
		q.ProtocolVersion = *in.meta.ProtocolVersion
		q.ClientCapabilities = *in.meta.ClientCapabilities
		q.ClientInfo = in.meta.ClientInfo
		if in.meta.LogLevel != nil {
			r.logLevel = *in.meta.LogLevel
		}
	} else {
		ss.mu.Lock()
		q.ProtocolVersion, q.ClientCapabilities, q.ClientInfo = ss.version, ss.clientCaps, ss.clientInfo
		ss.mu.Unlock()
	}
	r.token = in.meta.ProgressToken
	return q
}

// verifyRetry binds a request that may ask for input to its scope and,
// on a modern retry, reads its input responses and verifies its state
// (see requestInfo). It fails the request and returns false when the
// state does not verify.
func (ss *Session) verifyRetry(r *inflight, in *incoming, q *Request, scope string, args []byte) bool {
	if scope == "" {
		return true
	}
	r.scope, r.scopeArgs = scope+"\x00"+q.Tenant, args
	if r.era != mcp.Modern {
		return true
	}
	rm := in.retry
	if rm == nil {
		found, e := retryMembersOf(in.params)
		if e != nil {
			r.fail(e)
			return false
		}
		rm = &found
	}
	if e := ss.srv.readRetry(q, *rm, r.stateScope); e != nil {
		r.fail(e)
		return false
	}
	return true
}

// startCall runs a handler as a call: tracked (so it can be cancelled),
// admitted against the server's and its lane's limits, and run on a
// handler goroutine. mapErr says how an error from exec reaches the wire.
func (ss *Session) startCall(r *inflight, in *incoming, ln *lane, d Deadlines, exec func(context.Context) (mcp.Result, error), mapErr func(mcp.Result, error) (mcp.Result, *jsonrpc.Error)) {
	r.exec = func(ctx context.Context) (mcp.Result, error) {
		res, err := exec(ctx)
		return res, ss.srv.hideStorageFailure(r, err)
	}
	r.lane, r.finish, r.size = ln, mapErr, int64(len(in.params))
	if !ss.track(in.ctx, r) {
		return
	}
	r.armDeadlines(d)
	switch decision, retryAfter := ss.srv.admit.admit(r, time.Now()); decision {
	case admitRun:
		if in.runHere {
			if in.begin != nil {
				in.begin()
			}
			ss.runHere(r)
		} else {
			ss.run(r)
		}
	case admitQueued:
		// A finishing handler goroutine will pick it up.
		r.mu.Lock()
		r.queuedAt = time.Now()
		r.mu.Unlock()
	case admitRefused:
		r.fail(overloaded(retryAfter))
	case admitRateLimited:
		r.fail(rateLimited(retryAfter))
	}
}

// runHere runs r on the calling goroutine (Prepared.RunHere). A queued
// call its slot frees goes to a handler goroutine: this one belongs to
// r's transport, which is waiting to write r's answer.
func (ss *Session) runHere(r *inflight) {
	ran := ss.runCall(r)
	if next := ss.srv.admit.next(r, ran); next != nil {
		next.sess.run(next)
	}
}

// runCalls runs r and then, with the same goroutine, every queued call the
// admission hands over, until none is waiting.
func (s *Server) runCalls(r *inflight) {
	for r != nil {
		ran := r.sess.runCall(r)
		r = s.admit.next(r, ran)
	}
}

// runCall runs a call's handler and sends what it returns, unless the call
// already ended; it returns how long the handler ran.
func (ss *Session) runCall(r *inflight) time.Duration {
	if r.done() { // cancelled while it waited in the queue
		return 0
	}
	ss.handlerStarted()
	defer ss.handlerReturned()
	start := time.Now()
	r.mu.Lock()
	r.ranAt = start
	r.mu.Unlock()
	res, err := ss.invoke(r)
	ran := time.Since(start)

	discarded := true
	if !r.done() {
		var rpcErr *jsonrpc.Error
		var ir *InputRequired
		if errors.As(err, &ir) && r.scope != "" {
			res, rpcErr = ss.srv.inputRequired(r, ir, r.stateScope())
		} else {
			res, rpcErr = r.finish(res, err)
		}
		if rpcErr != nil {
			discarded = !r.fail(rpcErr)
		} else {
			discarded = !r.succeed(res)
		}
	}
	rec := HandlerRecord{ID: r.id, Tool: r.toolName, Ran: ran, Discarded: discarded}
	if discarded {
		r.mu.Lock()
		rec.Overrun = max(0, start.Add(ran).Sub(r.ended))
		outcome := r.outcome
		r.mu.Unlock()
		ss.srv.log.Info("handler returned after the request ended; result discarded",
			"id", r.id, "method", r.method, "tool", r.toolName, "outcome", outcome.String(), "overrun", rec.Overrun)
	}
	ss.srv.observeHandler(r.obsCtx, rec)
	return ran
}

// invoke runs the handler, turning a panic into an internal error.
func (ss *Session) invoke(r *inflight) (res mcp.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			ss.srv.log.Error("handler panicked", "id", r.id, "method", r.method, "tool", r.toolName,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res, err = nil, errPanicked
		}
	}()
	return r.exec(r.ctx)
}

var errPanicked = &mcp.ToolError{Code: mcp.FailureInternal, Message: "the handler failed unexpectedly"}

// storageFailure is a failure of the database a handler works with, as
// package store reports it (store.Error). Its text is the driver's and may
// name tables, constraints and values: it goes to the operator's log and
// never to the client.
type storageFailure interface {
	error
	StorageUnavailable() bool
}

// StorageRetryAfter is the retry advice for a database that was
// unavailable: long enough for a reconnect or a lock to clear.
const StorageRetryAfter = time.Second

// hideStorageFailure logs a storage failure in err and returns, instead,
// the tool failure the client gets; any other error passes unchanged. A
// database that was unavailable (a lost connection, a terminated backend,
// a deadlock, a busy file, a full disk) is a retryable storage_unavailable;
// a statement the database refused for good (a constraint, a syntax
// error) is an internal error. An interceptor that runs the handler in a
// transaction of its own maps failures there first (package idempotency
// answers ledger_unavailable).
func (s *Server) hideStorageFailure(r *inflight, err error) error {
	var sf storageFailure
	if !errors.As(err, &sf) {
		return err
	}
	s.log.Warn("a handler's database operation failed", "id", r.id, "method", r.method, "tool", r.toolName,
		"unavailable", sf.StorageUnavailable(), "err", err)
	if !sf.StorageUnavailable() {
		return &mcp.ToolError{Code: mcp.FailureInternal, Message: "the database refused an operation of this call; the server log has the details"}
	}
	return &mcp.ToolError{Code: mcp.FailureStorage, Retryable: true, RetryAfter: StorageRetryAfter,
		Message: "the database was unavailable (a lost connection, a lock or a full disk) and the operation's transaction was rolled back; retrying may succeed"}
}

// toolResult maps what a tool handler returned onto the wire, following the
// rules documented on ToolHandler.
func toolResult(res mcp.Result, err error) (mcp.Result, *jsonrpc.Error) {
	if err == nil {
		if res != nil {
			if _, ok := res.(*mcp.CallToolResult); !ok {
				return res, nil // an interceptor's own kind of answer
			}
		}
		c, _ := res.(*mcp.CallToolResult)
		if c == nil {
			c = &mcp.CallToolResult{}
		}
		if c.Content == nil {
			cp := *c // the handler's value may be shared
			cp.Content = []mcp.Content{}
			c = &cp
		}
		return c, nil
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return nil, rpcErr
	}
	var te *mcp.ToolError
	if errors.As(err, &te) {
		return te.Result(), nil
	}
	return (&mcp.ToolError{Code: mcp.FailureToolError, Message: err.Error()}).Result(), nil
}

// asResult turns a handler's typed result into an mcp.Result, keeping a
// nil pointer nil: wrapped in the interface it would pass for a result,
// and protocolResult could not refuse it.
func asResult[P interface {
	*T
	mcp.Result
}, T any](res P, err error) (mcp.Result, error) {
	if res == nil {
		return nil, err
	}
	return res, err
}

// protocolResult maps what a resource, prompt or completion handler
// returned: those have no tool-error form, so every failure is a protocol
// error. A handler returns a *jsonrpc.Error to choose the code; anything
// else is an internal error carrying the handler's message.
func protocolResult(res mcp.Result, err error) (mcp.Result, *jsonrpc.Error) {
	if err == nil {
		if res == nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "internal error: the handler returned no result")
		}
		return res, nil
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return nil, rpcErr
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "internal error: %v", err)
}

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

// startCall runs a handler as a call: tracked (so it can be cancelled),
// admitted against the server's and its lane's limits, and run on a
// handler goroutine. mapErr says how an error from exec reaches the wire.
// A nil exec runs the call's tool handler (r.handler with r.call).
func (ss *session) startCall(r *inflight, in *incoming, ln *lane, d Deadlines, exec func(context.Context) (mcp.Result, error), mapErr func(mcp.Result, error) (mcp.Result, *jsonrpc.Error)) {
	r.exec = exec
	r.lane, r.finish, r.size = ln, mapErr, int64(len(in.params))
	if !ss.track(in.ctx, r, in.sessionDone) {
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
		// A finishing handler goroutine will pick it up (admit recorded
		// when it joined the queue).
	case admitRefused:
		r.fail(overloaded(retryAfter))
	case admitRateLimited:
		r.fail(rateLimited(retryAfter))
	}
}

// runHere runs r on the calling goroutine (conn.Prepared.RunHere). A queued
// call its slot frees goes to a handler goroutine: this one belongs to
// r's transport, which is waiting to write r's answer.
func (ss *session) runHere(r *inflight) {
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
func (ss *session) runCall(r *inflight) time.Duration {
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
		// errors.AsType: a pointer to a local for errors.As would be
		// allocated on every call, whatever the error.
		if ir, ok := errors.AsType[*InputRequired](err); ok && r.scoped {
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
		rec.Outcome = r.outcome
		r.mu.Unlock()
		ss.srv.log.Info("handler returned after the request ended; result discarded",
			"id", r.id, "method", r.method, "tool", r.toolName, "outcome", rec.Outcome.String(), "overrun", rec.Overrun)
	}
	ss.srv.observeHandler(r.obsCtx, rec)
	return ran
}

// invoke runs the handler, turning a panic into an internal error.
func (ss *session) invoke(r *inflight) (res mcp.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			ss.srv.log.Error("handler panicked", "id", r.id, "method", r.method, "tool", r.toolName,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res, err = nil, errPanicked
		}
	}()
	if r.exec != nil {
		res, err = r.exec(r.ctx)
	} else {
		res, err = r.handler(r.ctx, r.call)
	}
	return res, ss.srv.hideStorageFailure(r, err)
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

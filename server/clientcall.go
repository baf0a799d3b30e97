package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/outbound"
)

// Errors from Request.CallClient.
var (
	// ErrModernEra: the request is served in the 2026-07-28 era, which has
	// no server-to-client requests; return an InputRequired error instead.
	ErrModernEra = errors.New("server: a 2026-07-28 request cannot call the client; ask for input with an input_required result")
	// ErrNoCapability: the client did not declare the capability the
	// request needs (sampling, elicitation or roots).
	ErrNoCapability = errors.New("server: the client did not declare the capability this request needs")
)

// CallClient sends a request to the client on this request's stream and
// waits for the answer (legacy era only): sampling/createMessage,
// elicitation/create or roots/list. It fails with ErrNoCapability if the
// client did not declare the capability, with a *jsonrpc.Error if the
// client answered with one, and with ctx's cause if ctx ends first, in
// which case the client is told the request was cancelled.
func (q *Request) CallClient(ctx context.Context, method string, params any) (json.RawMessage, error) {
	r := q.r
	if r == nil {
		return nil, ErrDetached
	}
	if r.era != mcp.Legacy {
		return nil, ErrModernEra
	}
	caps := q.ClientCapabilities
	switch method {
	case mcp.MethodCreateMessage:
		if caps.Sampling == nil {
			return nil, fmt.Errorf("%w: sampling", ErrNoCapability)
		}
	case mcp.MethodElicit:
		if caps.Elicitation == nil {
			return nil, fmt.Errorf("%w: elicitation", ErrNoCapability)
		}
	case mcp.MethodListRoots:
		if caps.Roots == nil {
			return nil, fmt.Errorf("%w: roots", ErrNoCapability)
		}
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	ss := r.sess
	reply := make(chan jsonrpc.Message, 1)
	ss.mu.Lock()
	ss.nextReq++
	id := jsonrpc.StringID("mcprel-" + strconv.FormatUint(ss.nextReq, 10))
	ss.pending[id] = reply
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		delete(ss.pending, id)
		ss.mu.Unlock()
	}()

	if err := r.out.Reserve(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.outcome != 0 {
		r.mu.Unlock()
		r.out.Unreserve()
		return nil, ErrRequestDone
	}
	err = r.out.PushReserved(outbound.Essential, r, jsonrpc.AppendRequest(nil, id, method, raw))
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}

	select {
	case m := <-reply:
		if m.Error != nil {
			return nil, m.Error
		}
		return m.Result, nil
	case <-ctx.Done():
	case <-r.ctx.Done():
		// The request itself ended (its session closed, say), even if the
		// handler passed a context not derived from it.
	}
	cancelled, _ := json.Marshal(mcp.CancelledParams{RequestID: id, Reason: "the server no longer needs the answer"})
	r.out.PushDroppable(r, jsonrpc.AppendNotification(nil, mcp.NotificationCancelled, cancelled))
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return nil, context.Cause(r.ctx)
}

// CreateMessage asks the client to sample from its model (legacy era).
func (q *Request) CreateMessage(ctx context.Context, p mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	raw, err := q.CallClient(ctx, mcp.MethodCreateMessage, p)
	if err != nil {
		return nil, err
	}
	var res mcp.CreateMessageResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("server: the client's sampling result is malformed: %w", err)
	}
	return &res, nil
}

// Elicit asks the client to collect input from its user (legacy era).
func (q *Request) Elicit(ctx context.Context, p mcp.ElicitParams) (*mcp.ElicitResult, error) {
	raw, err := q.CallClient(ctx, mcp.MethodElicit, p)
	if err != nil {
		return nil, err
	}
	var res mcp.ElicitResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("server: the client's elicitation result is malformed: %w", err)
	}
	return &res, nil
}

// deliver routes a client's response to the server request waiting for it.
func (ss *session) deliver(m jsonrpc.Message) bool {
	ss.mu.Lock()
	reply := ss.pending[m.ID]
	delete(ss.pending, m.ID)
	ss.mu.Unlock()
	if reply == nil {
		return false
	}
	reply <- m
	return true
}

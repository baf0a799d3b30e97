package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// CallHandler is a tool's handler as interceptors see it. Its result is
// any mcp.Result rather than a *mcp.CallToolResult, so that an interceptor
// may answer a call with something else (a created task, say); a tool
// author's ToolHandler is adapted to it at registration.
type CallHandler func(ctx context.Context, call *CallRequest) (mcp.Result, error)

// ToolInterceptor is a policy: what a tool's calls get beyond the
// lifecycle — a ledger, a task, an audit trail — given to AddTool (or
// AddTypedTool) after the handler, as a value:
//
//	srv.AddTool(t, h, idempotency.Keyed(l, kp), taskserver.AsTask(ts, tp))
//
// The handler's signature is the same with any policies or none. Policies
// stack like net/http middleware: the first given is the outermost, so
// here the key is claimed around the task's creation. Options.Interceptors
// wrap every tool, outside its own.
//
// A policy runs once per registration, never per call. Given the tool's
// declaration and the handler inside it (next), it may amend the
// declaration — its _meta, its retry class, a Check chained in front of
// the one there — and returns the handler that runs instead of next,
// which does its work around a call of next. An error refuses the
// registration. A policy written as a package exports three things:
//
//	// Audited records who called the tool before it runs.
//	func Audited(log *AuditLog) server.ToolInterceptor {
//		return func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
//			return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
//				entry := log.Begin(call.Tenant, call.Name)
//				call.Attach(entryKey{}, entry) // for the accessor below
//				res, err := next(ctx, call)
//				entry.End(err)
//				return res, err
//			}, nil
//		}
//	}
//
//	// Entry is the audit entry of the call: the typed accessor a handler
//	// uses, nil when the tool has no Audited policy.
//	func Entry(call *server.CallRequest) *AuditEntry {
//		e, _ := call.Attached(entryKey{}).(*AuditEntry)
//		return e
//	}
//
//	type entryKey struct{} // unexported: no other policy can collide
//
// What a policy gives the handler travels with the call (Attach), never
// in a context value, so that it also reaches a handler run outside its
// request (Server.Detached, a task's worker) when the policy attaches it
// there. Tool.Server gives a policy the server's logger and deadlines at
// registration. A policy that must go outside or inside another checks
// the order by the marks the policies inside it left (Tool.Mark).
type ToolInterceptor func(t *Tool, next CallHandler) (CallHandler, error)

// Mark records that a policy wrapped the tool, for the policies given
// outside it in the same AddTool to check the order they were stacked in.
// m is a value of a type the policy's package owns, unexported so that
// nothing else can make one; that package reads it back with Marked and
// exports a typed accessor for the others (idempotency.PolicyOf). A
// policy asks the marks, never the _meta another advertises: _meta is for
// clients and reviewers to read, and a tool's author may have written
// any of it by hand. A mark replaces an earlier one of the same type.
// AddTool starts every registration without marks, so only the policies
// it runs can make them.
func (t *Tool) Mark(m any) {
	for i, old := range t.marks {
		if reflect.TypeOf(old) == reflect.TypeOf(m) {
			t.marks[i] = m
			return
		}
	}
	t.marks = append(t.marks, m)
}

// Marked returns the mark of type T a policy gave t (Tool.Mark), and
// whether one did.
func Marked[T any](t *Tool) (T, bool) {
	for _, m := range t.marks {
		if v, ok := m.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

type attachment struct{ key, value any }

// Attach is how a policy gives the handler something of its own — the
// ledger's transaction, a task's run — for the policy's typed accessor to
// read back with Attached (idempotency.Tx(call), taskserver.Checkpoint).
// key is a value of a type the policy does not export, as for
// context.WithValue, so no two policies collide. A later Attach of the
// same key replaces the value. A policy attaches from its Check or its
// handler, before it calls the handler inside it; the call is not safe
// for concurrent Attach.
func (c *CallRequest) Attach(key, value any) {
	for i := range c.attached {
		if c.attached[i].key == key {
			c.attached[i].value = value
			return
		}
	}
	c.attached = append(c.attached, attachment{key, value})
}

// Attached returns what a policy attached under key, or nil.
func (c *CallRequest) Attached(key any) any {
	for _, a := range c.attached {
		if a.key == key {
			return a.value
		}
	}
	return nil
}

// Detached returns a call of one of s's tools that belongs to no request,
// for a policy that runs the tool's handler after its request has ended:
// a task's worker, in this process or, after a takeover, in another one.
// It carries c's exported fields (Name, Arguments, Tenant, Era,
// InputResponses...) and nothing else. Its progress reports and log
// messages go nowhere, its annotations are dropped, and asking the client
// for anything fails with ErrDetached.
func (s *Server) Detached(c CallRequest) *CallRequest {
	c.r, c.srv = nil, s
	c.args, c.supplied, c.attached = nil, nil, nil
	if c.KnownMeta == nil {
		c.KnownMeta = &mcp.RequestMeta{}
	}
	return &c
}

// intercept applies the server's interceptors, then the tool's own, to
// the tool's handler, innermost last, and returns the outermost handler.
func (s *Server) intercept(t *Tool, h CallHandler, own []ToolInterceptor) (CallHandler, error) {
	chain := append(append([]ToolInterceptor(nil), s.opts.Interceptors...), own...)
	for i := len(chain) - 1; i >= 0; i-- {
		next, err := chain[i](t, h)
		if err != nil {
			return nil, err
		}
		if next == nil {
			return nil, fmt.Errorf("server: tool %q: an interceptor returned no handler", t.Name)
		}
		h = next
	}
	return h, nil
}

// adapt turns a tool author's handler into a CallHandler, keeping a nil
// result nil (see asResult).
func adapt(h ToolHandler) CallHandler {
	return func(ctx context.Context, call *CallRequest) (mcp.Result, error) {
		return asResult(h(ctx, call))
	}
}

// ToolResult maps what a tool's handler returned onto the wire as a call of
// the tool would: a result, a tool failure (isError, with its structured
// body), or a JSON-RPC error — storage failures hidden behind their
// advice, as for any call. It is for an interceptor that runs the handler
// outside its request (a task's worker) and stores the answer for later.
func (s *Server) ToolResult(tool string, res mcp.Result, err error) (mcp.Result, *jsonrpc.Error) {
	err = s.hideStorageFailureOf(err, "tool", tool)
	if rt := s.lookupTool(tool); rt != nil {
		return rt.result(res, err)
	}
	return toolResult(res, err)
}

// DecodedArguments returns the call's arguments as decoded once when it
// arrived: objects as map[string]any, arrays as []any and numbers as
// json.Number, in the exact text the client sent. It is for a Check that
// must read arguments before the handler runs (an idempotency key, the
// fields that identify an operation) without decoding them again, and it
// must not be modified. It is nil for a call without arguments, and once
// the call is past its checks: a call waiting for admission holds only
// its raw Arguments, which admission counts.
func (c *CallRequest) DecodedArguments() map[string]any { return c.args }

// SupplyArgument lets a Check provide an argument that the call carried
// elsewhere (an idempotency key sent in _meta) so that an input schema
// that declares the argument, and may require it, sees it. A schema that
// does not declare it never does. The handler's Arguments are not
// changed.
func (c *CallRequest) SupplyArgument(name string, v any) {
	if _, ok := c.args[name]; ok {
		return
	}
	if c.supplied == nil {
		c.supplied = map[string]any{}
	}
	c.supplied[name] = v
}

// NarrowRetry lets a Check say that this one call is less safe to retry
// than its tool's class: a call of an idempotent tool made without a key
// may run twice if retried, so it is RetryUnsafe. A class wider than the
// tool's is ignored.
func (c *CallRequest) NarrowRetry(class mcp.RetryClass) {
	if class < c.retry {
		c.retry = class
	}
}

// Deadlines returns the deadlines a tool with policy p gets on this
// server: its class's defaults (Options.Fast or Standard) with the
// policy's own overrides.
func (s *Server) Deadlines(p Policy) Deadlines { return s.deadlines(p) }

// decodeArguments decodes a call's arguments once, keeping numbers exact.
func decodeArguments(args json.RawMessage) (map[string]any, error) {
	if len(args) == 0 {
		return nil, nil
	}
	var m map[string]any
	if err := unmarshalExact(args, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// unmarshalExact decodes one JSON value into v with numbers as
// json.Number, refusing anything after it.
func unmarshalExact(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("unexpected data after the value")
	}
	return nil
}

// validationValue is what the input schema judges: the decoded arguments
// with any supplied ones added and numbers as the validator reads them
// (float64). Containers are copied only where they hold a number, so
// arguments without numbers are judged as they are.
func validationValue(args, supplied map[string]any, declared func(string) bool) any {
	if args == nil && supplied == nil {
		return map[string]any{}
	}
	out, copied := withFloats(args)
	if len(supplied) == 0 {
		return out
	}
	m := out.(map[string]any)
	if !copied {
		m = maps.Clone(m)
		if m == nil {
			m = map[string]any{}
		}
	}
	for k, v := range supplied {
		if declared(k) {
			m[k] = v
		}
	}
	return m
}

// withFloats returns v with every json.Number in it turned into a float64,
// and whether anything had to be copied to do so.
func withFloats(v any) (any, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return x, false // out of float64's range: the schema judges the text
		}
		return f, true
	case map[string]any:
		var cp map[string]any
		for k, e := range x {
			if ne, changed := withFloats(e); changed {
				if cp == nil {
					cp = maps.Clone(x)
				}
				cp[k] = ne
			}
		}
		if cp == nil {
			return x, false
		}
		return cp, true
	case []any:
		var cp []any
		for i, e := range x {
			if ne, changed := withFloats(e); changed {
				if cp == nil {
					cp = slices.Clone(x)
				}
				cp[i] = ne
			}
		}
		if cp == nil {
			return x, false
		}
		return cp, true
	}
	return v, false
}

package server

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// ErrProgressNotIncreasing is returned by Request.ReportProgress for a value
// that is not above the last one sent; the report is dropped, because MCP
// requires progress to increase with every notification.
var ErrProgressNotIncreasing = errors.New("server: progress must increase with every report")

// Request is what every handler knows of the request it serves, and what
// it can send back before its result. The handler-specific request types
// (CallRequest, ReadRequest, PromptRequest, CompleteRequest) embed it.
type Request struct {
	// ID is the JSON-RPC id. It correlates messages; it is never an
	// idempotency key.
	ID jsonrpc.ID
	// Meta is the request's raw params._meta (nil when absent), for keys
	// the protocol does not define.
	Meta json.RawMessage
	// KnownMeta holds the members of params._meta that package mcp
	// defines, decoded once: the protocol's, and mcprel's own such as
	// mcp.MetaIdempotencyKey. Never nil. What it points to, like
	// ClientCapabilities' maps and ClientInfo, may be shared with the
	// tenant's other requests that sent the same _meta: read it, never
	// write to it.
	KnownMeta *mcp.RequestMeta
	// Era and ProtocolVersion say how the request is being served.
	Era             mcp.Era
	ProtocolVersion string
	// ClientCapabilities are the capabilities the client declared: in the
	// request's _meta (modern) or at initialize (legacy).
	ClientCapabilities mcp.ClientCapabilities
	// ClientInfo is the client's self-description, when it gave one.
	ClientInfo *mcp.Implementation
	// Tenant is who the request is for, as the transport established it
	// (see WithTenant); "" when the server has one tenant. State a handler
	// keeps across requests — idempotency records, task ids — must be
	// scoped to it.
	Tenant string
	// InputResponses holds the client's answers on a retry after an
	// input_required result (2026-07-28), by the keys the handler used.
	InputResponses map[string]json.RawMessage
	// RequestState is the state the handler returned with InputRequired,
	// verified; nil on a first attempt.
	RequestState []byte

	r   *inflight // nil for a detached call (see Server.Detached)
	srv *Server
}

// ErrDetached is returned by the methods of a request that talk to its
// client (CallClient, Elicit, CreateMessage) when the call is detached
// from any request: a task running in a worker, whose client is gone or is
// polling. Ask for input before the task starts instead.
var ErrDetached = errors.New("server: this call runs outside any request (a task): there is no client to ask")

// Server returns the server serving the request, so a handler can change
// what the server offers (its tools, prompts, resources) at run time.
func (q *Request) Server() *Server { return q.srv }

// HasProgressToken reports whether the client asked for progress.
func (q *Request) HasProgressToken() bool { return q.r != nil && q.r.token != nil }

// ReportProgress sends a progress notification if the client asked for
// progress; without a progress token it does nothing and returns nil.
// total <= 0 means the total is unknown.
//
// Values must increase: a value not above the last one sent is dropped and
// ErrProgressNotIncreasing returned. After the request has ended (completed,
// cancelled, timed out) nothing is sent and ErrRequestDone is returned.
// Reporting never blocks: under pressure a queued older value for the same
// request is replaced by the newer one.
func (q *Request) ReportProgress(progress, total float64, message string) error {
	if q.r == nil {
		return nil // a detached call has no progress token
	}
	return q.r.reportProgress(progress, total, message)
}

// Log sends a notifications/message for this request if the client asked
// for messages at this level: in the modern era through the request's
// logLevel _meta, in the legacy era through logging/setLevel. A client that
// asked for none gets none.
// Messages are dropped, like progress, when the client reads too slowly.
func (q *Request) Log(level mcp.LoggingLevel, logger string, data any) error {
	if q.r == nil {
		return nil // no client asked a detached call for messages
	}
	return q.r.log(level, logger, data)
}

// CallRequest is what a tool handler sees of its call.
type CallRequest struct {
	Request
	// Name is the tool's name.
	Name string
	// Arguments are the call's arguments, already validated against the
	// tool's input schema. Nil when the call had none. They may share
	// memory with the request's frame: a handler that keeps them past its
	// return (a task's worker) copies them.
	Arguments json.RawMessage
	// Task is the 2025-11-25 era's task member of the params, as sent
	// (mcp.TaskMetadata): the client asks for the call to run as a task.
	// It is nil when absent, and in the 2026-07-28 era, where the server
	// alone decides and a stray task member is ignored.
	Task json.RawMessage

	args     map[string]any // Arguments, decoded once when the call arrived (see Argument)
	supplied map[string]any // arguments a Check supplied for the schema (see SupplyArgument)
	retry    mcp.RetryClass // the tool's class, as a Check narrowed it
	attached []attachment   // what policies gave the handler (see Attach)
}

// ReadRequest is what a resource handler sees of a resources/read.
type ReadRequest struct {
	Request
	// URI is the resource being read.
	URI string
	// Vars holds the values a resource template matched, by variable name;
	// nil for a plain resource.
	Vars map[string]string
}

// PromptRequest is what a prompt handler sees of a prompts/get.
type PromptRequest struct {
	Request
	Name      string
	Arguments map[string]string
}

// CompleteRequest is what a completion handler sees of a
// completion/complete.
type CompleteRequest struct {
	Request
	Params mcp.CompleteParams
}

type tenantKey struct{}

// WithTenant returns a context that marks requests handled with it as
// belonging to tenant. Transports call it with the identity they
// authenticated (streamhttp maps bearer tokens to tenants); handlers read
// it as Request.Tenant, and Options.Tenant limits apply per tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFrom returns the tenant WithTenant put in ctx, or "".
func TenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// requestInfo builds the part of a handler's request every kind shares.
// A scoped request may ask for input: an input_required state is bound to
// its method and name (its tool, prompt or resource). The
// state is bound to the request's tenant and to args, the JSON of its
// arguments, too: a state issued for one tenant or one set of arguments
// is refused for another. It fails the request and returns false when a
// retry's state does not verify.
func (ss *session) requestInfo(r *inflight, in *incoming, scoped bool, name string, args []byte) (Request, bool) {
	q := ss.baseRequest(r, in)
	return q, ss.verifyRetry(r, in, &q, scoped, name, args)
}

// baseRequest is what a handler knows of every request: who sent it, in
// which era, with which capabilities.
func (ss *session) baseRequest(r *inflight, in *incoming) Request {
	q := Request{ID: r.id, Meta: in.rawMeta, KnownMeta: in.meta, Era: r.era, Tenant: TenantFrom(in.ctx), r: r, srv: ss.srv}
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
// The scope's parts are kept as they are and joined only when a state is
// signed or verified, not for every call.
func (ss *session) verifyRetry(r *inflight, in *incoming, q *Request, scoped bool, name string, args []byte) bool {
	if !scoped {
		return true
	}
	r.scoped, r.scope, r.scopeTenant, r.scopeArgs = true, name, q.Tenant, args
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

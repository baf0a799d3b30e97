package server

import (
	"context"
	"encoding/json"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// incoming is a decoded request on its way to its method.
type incoming struct {
	ctx     context.Context // bounds the request's life
	params  json.RawMessage
	meta    *mcp.RequestMeta
	rawMeta json.RawMessage
	retry   *retryMembers // found while the method split its params; nil when not looked for
	found   retryMembers  // what retry points to when a method found them (not a local of its own: that would escape)
	runHere bool          // see conn.Prepared.RunHere
	begin   func()        // see conn.Prepared.Begin
	// sessionDone is the Done channel of a ctx that ends only with the
	// session (conn.Prepared.SessionCtx); nil if not known to.
	sessionDone <-chan struct{}
}

// removedInModern are the handshake-era methods the 2026-07-28 revision
// removed; they get a method-not-found that says so.
var removedInModern = map[string]bool{
	mcp.MethodInitialize: true, mcp.MethodPing: true, mcp.MethodSetLevel: true,
	mcp.MethodSubscribe: true, mcp.MethodUnsubscribe: true,
}

func (ss *session) dispatch(r *inflight, in *incoming) {
	switch r.method {
	case mcp.MethodToolsList:
		ss.listTools(r, in)
	case mcp.MethodToolsCall:
		ss.callTool(r, in)
	case mcp.MethodResourcesList:
		ss.listResources(r, in)
	case mcp.MethodResourceTempls:
		ss.listResourceTemplates(r, in)
	case mcp.MethodResourcesRead:
		ss.readResource(r, in)
	case mcp.MethodPromptsList:
		ss.listPrompts(r, in)
	case mcp.MethodPromptsGet:
		ss.getPrompt(r, in)
	case mcp.MethodComplete:
		ss.complete(r, in)
	default:
		if builtIn(r.method) || !ss.serveRoute(r, in) {
			if r.era == mcp.Modern {
				ss.dispatchModern(r, in)
			} else {
				ss.dispatchLegacy(r, in)
			}
		}
	}
}

func (ss *session) dispatchLegacy(r *inflight, in *incoming) {
	switch r.method {
	case mcp.MethodInitialize:
		ss.initialize(r, in)
	case mcp.MethodPing:
		r.succeed(&mcp.EmptyResult{})
	case mcp.MethodSetLevel:
		var p mcp.SetLevelParams
		if !decodeInto(r, in.params, &p) {
			return
		}
		if p.Level == "" {
			r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.level is required"))
			return
		}
		ss.mu.Lock()
		ss.logLevel = p.Level
		ss.mu.Unlock()
		r.succeed(&mcp.EmptyResult{})
	case mcp.MethodSubscribe, mcp.MethodUnsubscribe:
		ss.subscribeResource(r, in, r.method == mcp.MethodSubscribe)
	default:
		r.fail(jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %q", r.method))
	}
}

func (ss *session) dispatchModern(r *inflight, in *incoming) {
	switch r.method {
	case mcp.MethodDiscover:
		r.succeed(&mcp.DiscoverResult{
			Cacheable:         ss.srv.cacheable(),
			SupportedVersions: mcp.SupportedVersions(),
			Capabilities:      ss.srv.capabilities(mcp.Modern),
			Instructions:      ss.srv.opts.Instructions,
		})
	case mcp.MethodListen:
		ss.listen(r, in)
	default:
		if removedInModern[r.method] {
			r.fail(jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %q is not part of protocol version %s", r.method, mcp.Version20260728))
			return
		}
		r.fail(jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %q", r.method))
	}
}

// decodeInto decodes params into v, failing the request with -32602 if
// they do not fit.
func decodeInto(r *inflight, params json.RawMessage, v any) bool {
	if err := decodeParams(params, v); err != nil {
		r.fail(err)
		return false
	}
	return true
}

// noCursor fails a list request that carries a cursor: every list fits on
// its first page, so no cursor was ever issued.
func noCursor(r *inflight, params json.RawMessage) bool {
	var p mcp.ListParams
	if !decodeInto(r, params, &p) {
		return false
	}
	if p.Cursor != nil {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid cursor %q", *p.Cursor))
		return false
	}
	return true
}

func (ss *session) initialize(r *inflight, in *incoming) {
	var p mcp.InitializeParams
	if !decodeInto(r, in.params, &p) {
		return
	}
	if p.ProtocolVersion == "" {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.protocolVersion is required"))
		return
	}
	version := mcp.NegotiateLegacy(p.ProtocolVersion)
	ss.mu.Lock()
	if ss.initialized {
		ss.mu.Unlock()
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "the session is already initialized"))
		return
	}
	ss.initialized = true
	ss.version = version
	ss.clientCaps = p.Capabilities
	info := p.ClientInfo
	ss.clientInfo = &info
	ss.mu.Unlock()
	r.succeed(&mcp.InitializeResult{
		ProtocolVersion: version,
		Capabilities:    ss.srv.capabilities(mcp.Legacy),
		ServerInfo:      ss.srv.info,
		Instructions:    ss.srv.opts.Instructions,
	})
}

func (ss *session) listTools(r *inflight, in *incoming) {
	if !noCursor(r, in.params) {
		return
	}
	res := &mcp.ListToolsResult{Tools: ss.srv.toolsFor(r.era, ss.cfg.QueueCapacity)}
	if res.Tools == nil {
		res.Tools = []mcp.Tool{}
	}
	if r.era == mcp.Modern {
		res.Cacheable = ss.srv.cacheable()
	}
	r.succeed(res)
}

func (ss *session) callTool(r *inflight, in *incoming) {
	// The params are split once, without copying; each member is decoded
	// by what needs it (_meta already was).
	var nameRaw, args, task json.RawMessage
	rm := &in.found
	if len(in.params) > 0 {
		err := jsonrpc.Members(in.params, func(k, v []byte) bool {
			switch string(k) {
			case "name":
				nameRaw = v
			case "arguments":
				args = v
			case "task":
				task = v
			default:
				rm.take(k, v)
			}
			return true
		})
		if err != nil {
			r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: params must be an object"))
			return
		}
	}
	in.retry = rm
	if nameRaw == nil || string(nameRaw) == "null" {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.name is required"))
		return
	}
	// A plain name is looked up as the frame's bytes, and then is the
	// registered tool's own string: no copy of it for every call.
	var name string
	var rt *registeredTool
	if body, ok := plainStringBytes(nameRaw); ok {
		if rt = ss.srv.lookupToolBytes(body); rt != nil {
			name = rt.def.Name
		} else {
			name = string(body)
		}
	} else {
		if err := json.Unmarshal(nameRaw, &name); err != nil {
			r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: name must be a string"))
			return
		}
		rt = ss.srv.lookupTool(name)
	}
	r.toolName = name
	if rt == nil {
		ss.srv.mu.RLock()
		notFound := ss.srv.toolNotFound
		ss.srv.mu.RUnlock()
		if notFound != nil {
			if e := notFound(name); e != nil {
				r.fail(e)
				return
			}
		}
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown tool %q", name))
		return
	}
	if string(args) == "null" {
		args = nil
	}
	if len(args) > 0 && args[0] != '{' {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.arguments must be an object"))
		return
	}
	call := &CallRequest{Name: name, Arguments: args, retry: rt.policy.Retry}
	r.args, r.secret = args, rt.policy.Secret
	if r.era != mcp.Modern && len(task) > 0 && string(task) != "null" {
		if rt.def.Execution == nil || rt.def.Execution.TaskSupport == "" || rt.def.Execution.TaskSupport == mcp.TaskForbidden {
			r.fail(jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "tool %q cannot be run as a task: call it without params.task", name))
			return
		}
		call.Task = task
	}
	call.Request = ss.baseRequest(r, in)
	// With no Check to read them, arguments a flat schema proves valid
	// are never decoded; any others are, and judged by the validator.
	if (rt.check != nil || !rt.provenValid(args)) && !ss.checkArguments(r, rt, in, call, args) {
		return
	}
	// A queued call holds its raw arguments, which admission counts; the
	// decoded copy would double that.
	call.args, call.supplied = nil, nil
	if !ss.verifyRetry(r, in, &call.Request, true, name, args) {
		return
	}
	r.retryable = call.retry != mcp.RetryUnsafe
	if g := rt.policy.Group; g != nil {
		r.group = g.ln
	}
	if rt.policy.Waits && in.begin != nil {
		in.runHere = false // its reading goroutine must go on reading
	}
	r.handler, r.call = rt.handler, call // no closure over them for every call
	ss.startCall(r, in, rt.lane, ss.srv.deadlines(rt.policy), nil, rt.result)
}

// refuse answers a call refused before it ran, as its tool's errors are.
func (ss *session) refuse(r *inflight, rt *registeredTool, err error) {
	if res, rpcErr := rt.result(nil, err); rpcErr != nil {
		r.fail(rpcErr)
	} else {
		r.succeed(res)
	}
}

// checkArguments decodes a call's arguments, runs the tool's Check and
// validates them, answering the call when they are refused; it reports
// whether the call goes on. The Check comes first: a call an interceptor
// refuses (one missing its idempotency key) is told so, whatever else is
// wrong with its arguments.
func (ss *session) checkArguments(r *inflight, rt *registeredTool, in *incoming, call *CallRequest, args json.RawMessage) bool {
	var err error
	if call.args, err = decodeArguments(args); err != nil {
		r.succeed((&mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: "arguments are not valid JSON"}).Result())
		return false
	}
	if rt.check != nil {
		ctx, err := rt.check(in.ctx, call)
		if err != nil {
			ss.refuse(r, rt, err)
			return false
		}
		if ctx != nil {
			in.ctx = ctx
		}
	}
	if err := rt.validate(call); err != nil {
		ss.refuse(r, rt, err)
		return false
	}
	return true
}

// plainStringBytes reads a JSON string of printable ASCII without
// escapes — a tool name, as good as always — without a decoder, as the
// bytes between the quotes; ok is false for any other value, which
// json.Unmarshal then reads (or refuses).
func plainStringBytes(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, false
	}
	body := raw[1 : len(raw)-1]
	for _, c := range body {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return nil, false
		}
	}
	return body, true
}

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// Route is a method that a package above server adds to it (AddRoute):
// the protocol's own methods are built in, and extensions such as tasks
// bring theirs this way. A routed request is served like a tool call —
// tracked, cancellable, admitted against the server's limits and bounded
// by two deadlines — in the eras the route names.
type Route struct {
	// Method is the JSON-RPC method, such as "tasks/get".
	Method string
	// Legacy and Modern say in which eras the method exists: the 2025
	// revisions behind initialize, the stateless 2026-07-28 one. A request
	// in an era the route leaves out gets method-not-found.
	Legacy, Modern bool
	// NameMember is the params member that a 2026-07-28 request's Mcp-Name
	// header mirrors over Streamable HTTP ("taskId" for tasks/*); empty
	// when the method has no Mcp-Name header.
	NameMember string
	// Deadlines bound each request; zero means Options.Standard.
	Deadlines Deadlines
	// Handler answers the request. A *jsonrpc.Error it returns goes on
	// the wire as it is; any other error is an internal error.
	Handler RouteHandler
}

// RouteHandler answers one request of a route.
type RouteHandler func(ctx context.Context, req *RouteRequest) (mcp.Result, error)

// RouteRequest is what a route's handler sees of its request.
type RouteRequest struct {
	Request
	// Method is the request's method.
	Method string
	// Params are the request's params as the client sent them (nil when
	// absent); _meta is in Request.Meta and KnownMeta, already decoded.
	Params json.RawMessage
}

// registeredRoute is a route with its admission lane.
type registeredRoute struct {
	Route
	lane *lane
}

// builtIn reports whether the server itself serves method.
func builtIn(method string) bool {
	switch method {
	case mcp.MethodInitialize, mcp.MethodPing, mcp.MethodSetLevel, mcp.MethodSubscribe, mcp.MethodUnsubscribe,
		mcp.MethodToolsList, mcp.MethodToolsCall, mcp.MethodResourcesList, mcp.MethodResourceTempls,
		mcp.MethodResourcesRead, mcp.MethodPromptsList, mcp.MethodPromptsGet, mcp.MethodComplete,
		mcp.MethodDiscover, mcp.MethodListen:
		return true
	}
	return false
}

// AddRoute adds a method to the server, replacing an earlier route of the
// same method. It refuses a method the server serves itself, one in
// neither era, and one without a handler.
func (s *Server) AddRoute(rt Route) error {
	switch {
	case rt.Method == "" || strings.HasPrefix(rt.Method, "notifications/") || strings.HasPrefix(rt.Method, "rpc."):
		return fmt.Errorf("server: %q cannot be a routed request method", rt.Method)
	case builtIn(rt.Method):
		return fmt.Errorf("server: %s is served by the server itself", rt.Method)
	case !rt.Legacy && !rt.Modern:
		return fmt.Errorf("server: route %s: serve it in at least one era (Legacy, Modern)", rt.Method)
	case rt.Handler == nil:
		return fmt.Errorf("server: route %s has no handler", rt.Method)
	}
	if err := rt.Deadlines.validate("route " + rt.Method + " Deadlines"); err != nil {
		return err
	}
	rt.Deadlines = rt.Deadlines.or(s.opts.Standard)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.routes == nil {
		s.routes = map[string]*registeredRoute{}
	}
	s.routes[rt.Method] = &registeredRoute{Route: rt, lane: newLane(0, 0, 0, 0)}
	return nil
}

func (s *Server) lookupRoute(method string) *registeredRoute {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.routes[method]
}

// NameMember returns the params member that a 2026-07-28 request's
// Mcp-Name header must mirror for method, "" when it has none: "name" for
// tools/call and prompts/get, "uri" for resources/read, and what a route
// declares. Transports call it to check the header against the body.
func (ss *session) NameMember(method string) string {
	switch method {
	case mcp.MethodToolsCall, mcp.MethodPromptsGet:
		return "name"
	case mcp.MethodResourcesRead:
		return "uri"
	}
	if rt := ss.srv.lookupRoute(method); rt != nil && rt.Modern {
		return rt.NameMember
	}
	return ""
}

// serveRoute serves a routed request, or reports false when method has no
// route. A route not served in the request's era is method-not-found.
func (ss *session) serveRoute(r *inflight, in *incoming) bool {
	rt := ss.srv.lookupRoute(r.method)
	if rt == nil {
		return false
	}
	if (r.era == mcp.Modern && !rt.Modern) || (r.era == mcp.Legacy && !rt.Legacy) {
		version := mcp.Version20260728
		if r.era == mcp.Legacy {
			version = ss.Version()
		}
		r.fail(jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %q is not part of protocol version %s", r.method, version))
		return true
	}
	req := &RouteRequest{Request: ss.baseRequest(r, in), Method: r.method, Params: in.params}
	ss.startCall(r, in, rt.lane, rt.Deadlines, func(ctx context.Context) (mcp.Result, error) {
		return rt.Handler(ctx, req)
	}, protocolResult)
	return true
}

// Declaration is what a package above server adds to the capabilities the
// server advertises: members of its own (the 2025-11-25 "tasks") and
// extensions (capabilities.extensions, such as
// "io.modelcontextprotocol/tasks"), each for the eras that have them.
type Declaration struct {
	// Legacy and Modern say in which eras's answers the declaration
	// appears: the initialize result, the server/discover result.
	Legacy, Modern bool
	// Capabilities are capability members by name. A name the server
	// advertises itself (tools, resources, prompts, logging, completions,
	// experimental, extensions) is refused.
	Capabilities map[string]any
	// Extensions are capabilities.extensions members by extension id.
	Extensions map[string]map[string]any
}

// Declare adds d to the server's advertised capabilities. Later
// declarations of the same name replace earlier ones.
func (s *Server) Declare(d Declaration) error {
	if !d.Legacy && !d.Modern {
		return fmt.Errorf("server: a declaration must name an era (Legacy, Modern)")
	}
	for name := range d.Capabilities {
		switch name {
		case "tools", "resources", "prompts", "logging", "completions", "experimental", "extensions", "":
			return fmt.Errorf("server: capability %q is advertised by the server itself", name)
		}
	}
	caps := make(map[string]json.RawMessage, len(d.Capabilities))
	for name, v := range d.Capabilities {
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("server: capability %q: %w", name, err)
		}
		caps[name] = raw
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, era := range []struct {
		on   bool
		decl *declared
	}{{d.Legacy, &s.declaredLegacy}, {d.Modern, &s.declaredModern}} {
		if !era.on {
			continue
		}
		// New maps each time: capabilities hands the old ones out.
		era.decl.caps = merged(era.decl.caps, caps)
		era.decl.extensions = merged(era.decl.extensions, d.Extensions)
	}
	return nil
}

// declared is what packages above the server declared for one era.
type declared struct {
	caps       map[string]json.RawMessage
	extensions map[string]map[string]any
}

// merged returns a new map with src's entries over dst's.
func merged[V any](dst, src map[string]V) map[string]V {
	if len(src) == 0 {
		return dst
	}
	out := maps.Clone(dst)
	if out == nil {
		out = make(map[string]V, len(src))
	}
	maps.Copy(out, src)
	return out
}

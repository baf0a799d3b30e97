package server

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// ResourceHandler reads a resource. Return a *jsonrpc.Error to choose the
// protocol error (NotFound builds the right one for the era); any other
// error becomes an internal error.
type ResourceHandler func(ctx context.Context, req *ReadRequest) (*mcp.ReadResourceResult, error)

type registeredResource struct {
	def     mcp.Resource
	handler ResourceHandler
}

type registeredTemplate struct {
	def     mcp.ResourceTemplate
	match   *regexp.Regexp
	vars    []string
	handler ResourceHandler
}

// AddResource registers a resource under its URI, replacing one with the
// same URI.
func (s *Server) AddResource(r mcp.Resource, h ResourceHandler) error {
	if h == nil || r.Name == "" {
		return fmt.Errorf("server: resource %q needs a name and a handler", r.URI)
	}
	if _, err := url.Parse(r.URI); err != nil || r.URI == "" {
		return fmt.Errorf("server: resource %q: invalid URI", r.URI)
	}
	s.mu.Lock()
	s.resources[r.URI] = &registeredResource{def: r, handler: h}
	s.mu.Unlock()
	s.listChanged(kindResources)
	return nil
}

// AddResourceTemplate registers a family of resources. The template is an
// RFC 6570 level-1 template: each {name} matches one or more characters
// other than "/", and its value reaches the handler in ReadRequest.Vars.
func (s *Server) AddResourceTemplate(t mcp.ResourceTemplate, h ResourceHandler) error {
	if h == nil || t.Name == "" {
		return fmt.Errorf("server: resource template %q needs a name and a handler", t.URITemplate)
	}
	re, vars, err := compileURITemplate(t.URITemplate)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.templates = slices.DeleteFunc(s.templates, func(x *registeredTemplate) bool { return x.def.URITemplate == t.URITemplate })
	s.templates = append(s.templates, &registeredTemplate{def: t, match: re, vars: vars, handler: h})
	slices.SortFunc(s.templates, func(a, b *registeredTemplate) int { return cmp.Compare(a.def.URITemplate, b.def.URITemplate) })
	s.mu.Unlock()
	s.listChanged(kindResources)
	return nil
}

var templateVar = regexp.MustCompile(`\{([A-Za-z0-9_]+)\}`)

func compileURITemplate(tmpl string) (*regexp.Regexp, []string, error) {
	if strings.ContainsAny(tmpl, "{}") && !templateVar.MatchString(tmpl) {
		return nil, nil, fmt.Errorf("server: URI template %q: only {name} expressions are supported", tmpl)
	}
	var vars []string
	var pattern strings.Builder
	pattern.WriteString("^")
	last := 0
	for _, m := range templateVar.FindAllStringSubmatchIndex(tmpl, -1) {
		literal := tmpl[last:m[0]]
		if strings.ContainsAny(literal, "{}") {
			return nil, nil, fmt.Errorf("server: URI template %q: only {name} expressions are supported", tmpl)
		}
		pattern.WriteString(regexp.QuoteMeta(literal))
		pattern.WriteString("([^/]+)")
		vars = append(vars, tmpl[m[2]:m[3]])
		last = m[1]
	}
	if strings.ContainsAny(tmpl[last:], "{}") {
		return nil, nil, fmt.Errorf("server: URI template %q: only {name} expressions are supported", tmpl)
	}
	pattern.WriteString(regexp.QuoteMeta(tmpl[last:]))
	pattern.WriteString("$")
	re, err := regexp.Compile(pattern.String())
	return re, vars, err
}

// RemoveResource unregisters a resource and reports whether it was there.
func (s *Server) RemoveResource(uri string) bool {
	s.mu.Lock()
	_, ok := s.resources[uri]
	delete(s.resources, uri)
	s.mu.Unlock()
	if ok {
		s.listChanged(kindResources)
	}
	return ok
}

// RemoveResourceTemplate unregisters a resource template. Reads already
// running finish normally.
func (s *Server) RemoveResourceTemplate(uriTemplate string) bool {
	s.mu.Lock()
	n := len(s.templates)
	s.templates = slices.DeleteFunc(s.templates, func(x *registeredTemplate) bool { return x.def.URITemplate == uriTemplate })
	ok := len(s.templates) < n
	s.mu.Unlock()
	if ok {
		s.listChanged(kindResources)
	}
	return ok
}

// NotFound returns the protocol error for a resource that does not exist:
// -32002 in the legacy era, -32602 in the modern one, with the URI in data.
func NotFound(req *ReadRequest) *jsonrpc.Error {
	code := mcp.CodeResourceNotFoundLegacy
	if req.Era == mcp.Modern {
		code = jsonrpc.CodeInvalidParams
	}
	return jsonrpc.NewError(code, "resource not found: %s", req.URI).WithData(map[string]string{"uri": req.URI})
}

func (ss *session) listResources(r *inflight, in *incoming) {
	if !noCursor(r, in.params) {
		return
	}
	ss.srv.mu.RLock()
	list := make([]mcp.Resource, 0, len(ss.srv.resources))
	for _, rr := range ss.srv.resources {
		list = append(list, rr.def)
	}
	ss.srv.mu.RUnlock()
	slices.SortFunc(list, func(a, b mcp.Resource) int { return cmp.Compare(a.URI, b.URI) })
	res := &mcp.ListResourcesResult{Resources: list}
	if r.era == mcp.Modern {
		res.Cacheable = ss.srv.cacheable()
	}
	r.succeed(res)
}

func (ss *session) listResourceTemplates(r *inflight, in *incoming) {
	if !noCursor(r, in.params) {
		return
	}
	ss.srv.mu.RLock()
	list := make([]mcp.ResourceTemplate, 0, len(ss.srv.templates))
	for _, t := range ss.srv.templates {
		list = append(list, t.def)
	}
	ss.srv.mu.RUnlock()
	res := &mcp.ListResourceTemplatesResult{ResourceTemplates: list}
	if r.era == mcp.Modern {
		res.Cacheable = ss.srv.cacheable()
	}
	r.succeed(res)
}

// findResource resolves a URI to a plain resource first, then to the first
// template (in URI-template order) that matches it.
func (s *Server) findResource(uri string) (ResourceHandler, map[string]string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if rr := s.resources[uri]; rr != nil {
		return rr.handler, nil
	}
	for _, t := range s.templates {
		if m := t.match.FindStringSubmatch(uri); m != nil {
			vars := make(map[string]string, len(t.vars))
			for i, name := range t.vars {
				vars[name] = m[i+1]
			}
			return t.handler, vars
		}
	}
	return nil, nil
}

func (ss *session) readResource(r *inflight, in *incoming) {
	var p mcp.ReadResourceParams
	if !decodeInto(r, in.params, &p) {
		return
	}
	if p.URI == nil {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.uri is required"))
		return
	}
	q, ok := ss.requestInfo(r, in, true, *p.URI, nil)
	if !ok {
		return
	}
	req := &ReadRequest{Request: q, URI: *p.URI}
	h, vars := ss.srv.findResource(*p.URI)
	if h == nil {
		r.fail(NotFound(req))
		return
	}
	req.Vars = vars
	modern := r.era == mcp.Modern
	ss.startCall(r, in, ss.srv.resourceLane, ss.srv.opts.Standard, func(ctx context.Context) (mcp.Result, error) {
		res, err := h(ctx, req)
		if err == nil && res != nil && modern && res.TTLMs == nil {
			cp := *res // the handler's value may be shared
			cp.Cacheable = ss.srv.cacheable()
			res = &cp
		}
		return asResult(res, err)
	}, protocolResult)
}

// subscribeResource handles the legacy resources/subscribe and unsubscribe.
func (ss *session) subscribeResource(r *inflight, in *incoming, subscribe bool) {
	var p mcp.SubscribeParams
	if !decodeInto(r, in.params, &p) {
		return
	}
	if p.URI == nil {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.uri is required"))
		return
	}
	ss.mu.Lock()
	if subscribe {
		ss.resourceSubs[*p.URI] = struct{}{}
	} else {
		delete(ss.resourceSubs, *p.URI)
	}
	ss.mu.Unlock()
	r.succeed(&mcp.EmptyResult{})
}

// NotifyResourceUpdated tells every client subscribed to uri that the
// resource changed: legacy sessions that called resources/subscribe, and
// modern subscriptions/listen streams that listed it.
func (s *Server) NotifyResourceUpdated(uri string) {
	for _, ss := range s.sessionsSnapshot() {
		ss.notifyResourceUpdated(uri)
	}
}

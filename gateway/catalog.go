package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// catalog is what the gateway registered on the server, and for which
// upstream: the downstream name (or URI) of each tool, prompt, resource
// and template, with the upstream's own name and the definition last
// registered (to register again only what changed). Guarded by
// Gateway.mu.
type catalog struct {
	tools     map[string]entry
	prompts   map[string]entry
	resources map[string]entry
	templates map[string]entry
}

type entry struct {
	link *link
	name string // the upstream's name (or URI) for it
	def  []byte // the definition registered, as JSON
}

func newCatalog() catalog {
	return catalog{tools: map[string]entry{}, prompts: map[string]entry{}, resources: map[string]entry{}, templates: map[string]entry{}}
}

var toolNameOK = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
var badNameChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// maxName is the protocol's bound on a tool's name.
const maxName = 128

// downstreamName is what downstream clients call an upstream's tool or
// prompt: the name itself with one upstream, "UPSTREAM_name" with
// several. A name that is not a valid tool name, or that the prefix
// pushes past 128 characters, is mended (invalid characters become "_"),
// cut, and ends in "-" and 8 hex digits of the original name's SHA-256,
// so that two different names stay different.
func (l *link) downstreamName(name string) string {
	prefix := ""
	if l.g.prefix {
		prefix = l.up.Name + "_"
	}
	full := prefix + name
	if toolNameOK.MatchString(full) {
		return full
	}
	sum := sha256.Sum256([]byte(name))
	tag := "-" + hex.EncodeToString(sum[:4])
	mended := badNameChars.ReplaceAllString(name, "_")
	if room := maxName - len(prefix) - len(tag); len(mended) > room {
		mended = mended[:room]
	}
	return prefix + mended + tag
}

// relist reads what the upstream lists and brings the server's
// registrations in line: new and changed definitions are registered,
// vanished ones removed. A listing that fails leaves the last one
// standing.
func (l *link) relist(ctx context.Context, c *client.Client) {
	lctx, cancel := context.WithTimeout(ctx, l.g.opts.StartWait)
	defer cancel()
	caps := c.ServerCapabilities()
	ok := true
	if caps.Tools != nil {
		tools, err := c.ListTools(lctx)
		if err != nil {
			l.log.Warn("gateway: could not list the upstream's tools", "err", err)
			ok = false
		} else {
			l.g.syncTools(l, tools)
		}
	} else {
		l.g.syncTools(l, nil)
	}
	if caps.Prompts != nil {
		prompts, err := c.ListPrompts(lctx)
		if err != nil {
			l.log.Warn("gateway: could not list the upstream's prompts", "err", err)
		} else {
			l.g.syncPrompts(l, prompts)
		}
	}
	if caps.Resources != nil {
		resources, err := c.ListResources(lctx)
		if err != nil {
			l.log.Warn("gateway: could not list the upstream's resources", "err", err)
		} else {
			l.g.syncResources(l, resources)
		}
		templates, err := c.ListResourceTemplates(lctx)
		if err != nil {
			l.log.Warn("gateway: could not list the upstream's resource templates", "err", err)
		} else {
			l.g.syncTemplates(l, templates)
		}
	}
	if ok {
		l.listedOnce.Do(func() { close(l.firstListed) })
		l.g.obs.UpstreamEvent(UpstreamEvent{Upstream: l.up.Name, Kind: EventListed})
	}
}

// syncTools registers l's tools and removes the ones it no longer lists.
func (g *Gateway) syncTools(l *link, tools []mcp.Tool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	for _, t := range tools {
		name := l.downstreamName(t.Name)
		if prev, ok := g.catalog.tools[name]; ok && prev.link != l {
			l.log.Warn("gateway: two upstreams list a tool of the same name; the first keeps it", "tool", name, "kept_by", prev.link.up.Name)
			continue
		}
		if seen[name] {
			l.log.Warn("gateway: the upstream lists a tool name twice; the first is kept", "tool", name)
			continue
		}
		seen[name] = true
		tp := g.opts.Policy.forTool(name)
		def, _ := json.Marshal(struct {
			T mcp.Tool
			P ToolPolicy
		}{t, tp})
		if prev, ok := g.catalog.tools[name]; ok && bytes.Equal(prev.def, def) {
			continue
		}
		st := server.Tool{
			// The upstream judges its own arguments: it may read its
			// schema otherwise than this server would, and take some from
			// elsewhere (a key in _meta).
			Unchecked: true,
			Name:      name, Title: t.Title, Description: t.Description,
			InputSchema: t.InputSchema, OutputSchema: t.OutputSchema,
			Annotations: t.Annotations, Meta: upstreamMeta(t.Meta),
			Policy: server.Policy{Retry: tp.Retry, IdleTimeout: tp.Idle, MaxTimeout: tp.Max, Group: l.group},
		}
		if err := g.srv.AddTool(st, l.forwardTool(t.Name, tp)); err != nil {
			l.log.Warn("gateway: the upstream's tool cannot be served; left out", "tool", t.Name, "err", err)
			delete(g.catalog.tools, name)
			continue
		}
		g.catalog.tools[name] = entry{link: l, name: t.Name, def: def}
	}
	for name, e := range g.catalog.tools {
		if e.link == l && !seen[name] {
			g.srv.RemoveTool(name)
			delete(g.catalog.tools, name)
		}
	}
}

// syncPrompts registers l's prompts, named as its tools are.
func (g *Gateway) syncPrompts(l *link, prompts []mcp.Prompt) {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	for _, p := range prompts {
		name := l.downstreamName(p.Name)
		if prev, ok := g.catalog.prompts[name]; (ok && prev.link != l) || seen[name] {
			l.log.Warn("gateway: a prompt of this name is already served; left out", "prompt", name)
			continue
		}
		seen[name] = true
		def, _ := json.Marshal(p)
		if prev, ok := g.catalog.prompts[name]; ok && bytes.Equal(prev.def, def) {
			continue
		}
		dp := p
		dp.Name = name
		if err := g.srv.AddPrompt(dp, l.forwardPrompt(p.Name)); err != nil {
			l.log.Warn("gateway: the upstream's prompt cannot be served; left out", "prompt", p.Name, "err", err)
			continue
		}
		g.catalog.prompts[name] = entry{link: l, name: p.Name, def: def}
	}
	for name, e := range g.catalog.prompts {
		if e.link == l && !seen[name] {
			g.srv.RemovePrompt(name)
			delete(g.catalog.prompts, name)
		}
	}
}

// syncResources registers l's resources under their own URIs: a URI
// another upstream already serves stays with it.
func (g *Gateway) syncResources(l *link, resources []mcp.Resource) {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range resources {
		if prev, ok := g.catalog.resources[r.URI]; (ok && prev.link != l) || seen[r.URI] {
			l.log.Warn("gateway: a resource of this URI is already served; left out", "uri", r.URI)
			continue
		}
		seen[r.URI] = true
		def, _ := json.Marshal(r)
		if prev, ok := g.catalog.resources[r.URI]; ok && bytes.Equal(prev.def, def) {
			continue
		}
		if err := g.srv.AddResource(r, l.forwardRead()); err != nil {
			l.log.Warn("gateway: the upstream's resource cannot be served; left out", "uri", r.URI, "err", err)
			continue
		}
		g.catalog.resources[r.URI] = entry{link: l, name: r.URI, def: def}
	}
	for uri, e := range g.catalog.resources {
		if e.link == l && !seen[uri] {
			g.srv.RemoveResource(uri)
			delete(g.catalog.resources, uri)
		}
	}
}

// syncTemplates registers l's resource templates. The server keeps no
// way to remove a template, so one an upstream stops listing stays listed
// and its reads are forwarded (and refused by the upstream).
func (g *Gateway) syncTemplates(l *link, templates []mcp.ResourceTemplate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range templates {
		if prev, ok := g.catalog.templates[t.URITemplate]; ok {
			if prev.link != l {
				l.log.Warn("gateway: a resource template of this URI is already served; left out", "uriTemplate", t.URITemplate)
			}
			continue
		}
		if err := g.srv.AddResourceTemplate(t, l.forwardRead()); err != nil {
			l.log.Warn("gateway: the upstream's resource template cannot be served; left out", "uriTemplate", t.URITemplate, "err", err)
			continue
		}
		g.catalog.templates[t.URITemplate] = entry{link: l, name: t.URITemplate}
	}
}

// ownsResource reports whether a resource updated upstream is one l
// serves downstream.
func (g *Gateway) ownsResource(l *link, uri string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.catalog.resources[uri]
	return ok && e.link == l
}

// upstreamMeta is what of an upstream tool's _meta is passed on: the
// upstream's own members, never mcprel's (dev.mcprel/...), which speak of
// this gateway's contract and are set by the server.
func upstreamMeta(m mcp.Meta) mcp.Meta {
	if len(m) == 0 {
		return nil
	}
	out := mcp.Meta{}
	for k, v := range m {
		if !strings.HasPrefix(k, "dev.mcprel/") {
			out[k] = v
		}
	}
	return out
}

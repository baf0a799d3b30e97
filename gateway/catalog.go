package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/taskserver"
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
	up   string            // the upstream's own name (or URI) for it
	def  [sha256.Size]byte // of the definition registered, as JSON: a changed one is registered again
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
// several, except for the upstream that keeps its names (KeepNames) — and
// for that one too when the name begins with an upstream's name and "_",
// where it could meet that upstream's prefixed names. A name that is not
// a valid tool name, or that the prefix pushes past 128 characters, is
// mended (invalid characters become "_"), cut, and ends in "-" and 8 hex
// digits of the original name's SHA-256, so that two different names stay
// different.
func (l *link) downstreamName(name string) string {
	prefix := ""
	if top := l.g.top.Load(); top.prefix && (!l.up.KeepNames || top.prefixedLike(name)) {
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

// prefixedLike reports whether name begins as a prefixed name does: an
// upstream's name and "_". Upstream names hold no "_", so such a name can
// only meet the names of that one upstream.
func (t *topology) prefixedLike(name string) bool {
	up, _, ok := strings.Cut(name, "_")
	if !ok {
		return false
	}
	for _, l := range t.links {
		if l.up.Name == up {
			return true
		}
	}
	return false
}

// relist reads what the upstream lists and brings the server's
// registrations in line: new and changed definitions are registered,
// vanished ones removed, and all of a kind the upstream no longer
// advertises (after a restart, say). A listing that fails leaves the last
// one standing.
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
			l.g.syncTools(l, tools, fresh)
		}
	} else {
		l.g.syncTools(l, nil, fresh)
	}
	if caps.Prompts != nil {
		prompts, err := c.ListPrompts(lctx)
		if err != nil {
			l.log.Warn("gateway: could not list the upstream's prompts", "err", err)
		} else {
			l.g.syncPrompts(l, prompts, fresh)
		}
	} else {
		l.g.syncPrompts(l, nil, fresh)
	}
	if caps.Resources != nil {
		resources, err := c.ListResources(lctx)
		if err != nil {
			l.log.Warn("gateway: could not list the upstream's resources", "err", err)
		} else {
			l.g.syncResources(l, resources, fresh)
		}
		templates, err := c.ListResourceTemplates(lctx)
		if err != nil {
			l.log.Warn("gateway: could not list the upstream's resource templates", "err", err)
		} else {
			l.g.syncTemplates(l, templates, fresh)
		}
	} else {
		l.g.syncResources(l, nil, fresh)
		l.g.syncTemplates(l, nil, fresh)
	}
	if ok {
		l.listedOnce.Do(func() { close(l.firstListed) })
		l.g.obs.UpstreamEvent(UpstreamEvent{Upstream: l.up.Name, Kind: EventListed})
	}
}

// serving says what a listing served is: a fresh one from the upstream,
// or the last one served again (by Reload: under names and a policy that
// may have changed), every item registered again when force is set (its
// policy may have changed where its definition did not).
type serving struct{ again, force bool }

var fresh = serving{}

// listing is how one kind of what an upstream lists — tools, prompts,
// resources, templates — is served.
type listing[T any] struct {
	what    string           // in log lines
	entries map[string]entry // the catalog's, by downstream name (or URI)
	last    *[]T             // the link's last listing of this kind, guarded by Gateway.mu
	how     serving
	// names are the upstream's name for an item and the downstream's.
	names  func(T) (up, down string)
	add    func(down string, item T) error
	remove func(down string)
}

// serveListing registers what l lists of one kind and removes what it no longer
// lists. A downstream name (or URI) two upstreams list is the earlier
// upstream's, in the order given: a later one yields it, and an earlier
// one that lists it after a later one takes it over.
func serveListing[T any](g *Gateway, l *link, ls listing[T], items []T) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case l.retired:
		// Reload took the upstream out: it serves nothing from now on,
		// whatever a relisting under way found.
		items = nil
	case ls.how.again:
		items = *ls.last
	default:
		*ls.last = items
	}
	seen := map[string]bool{}
	for _, it := range items {
		up, down := ls.names(it)
		if seen[down] {
			l.log.Warn("gateway: the upstream lists a name twice; the first is kept", ls.what, down)
			continue
		}
		prev, had := ls.entries[down]
		if had && prev.link != l && prev.link.index < l.index {
			l.log.Warn("gateway: two upstreams list the same name; the first keeps it", ls.what, down, "kept_by", prev.link.up.Name)
			continue
		}
		seen[down] = true
		b, _ := json.Marshal(it)
		def := sha256.Sum256(b)
		if had && prev.link == l && prev.def == def && !ls.how.force {
			continue
		}
		if had && prev.link != l {
			l.log.Warn("gateway: two upstreams list the same name; the first takes it", ls.what, down, "from", prev.link.up.Name)
		}
		if err := ls.add(down, it); err != nil {
			l.log.Warn("gateway: what the upstream lists cannot be served; left out", ls.what, up, "err", err)
			if had && prev.link == l {
				ls.remove(down) // its earlier definition is stale
				delete(ls.entries, down)
			}
			continue
		}
		ls.entries[down] = entry{link: l, up: up, def: def}
	}
	for down, e := range ls.entries {
		if e.link == l && !seen[down] {
			ls.remove(down)
			delete(ls.entries, down)
		}
	}
}

// syncTools serves l's tools.
func (g *Gateway) syncTools(l *link, tools []mcp.Tool, how serving) {
	serveListing(g, l, listing[mcp.Tool]{
		what: "tool", entries: g.catalog.tools, last: &l.listing.tools, how: how,
		names: func(t mcp.Tool) (string, string) { return t.Name, l.downstreamName(t.Name) },
		add: func(name string, t mcp.Tool) error {
			tp := g.policy.Load().forTool(name)
			upTasks := l.upstreamTasksOf(t)
			if tp.Task == nil && g.opts.Tasks != nil {
				tp.Task = mirroredTask(upTasks, tp, l.eraNow())
			}
			var policies []server.ToolInterceptor
			if tp.Keyed != nil {
				policies = append(policies, idempotency.Keyed(g.opts.Ledger, tp.ledgerPolicy()))
			}
			if tp.Task != nil {
				// Run again after its gateway died only where that cannot
				// do it twice — or where the upstream's own task, whose
				// id the task keeps, is followed again rather than made
				// again; otherwise it ends failed, outcome unknown.
				// A forward's cancellation is passed upstream, and the
				// task ends by what it left (ReadsCancel).
				task := *tp.Task
				task.Resumable = tp.retryClass() != mcp.RetryUnsafe || upTasks != noUpstreamTask
				task.ReadsCancel = true
				policies = append(policies, taskserver.AsTask(g.opts.Tasks, task))
			}
			sp := tp.Server
			sp.Group, sp.Waits = l.group, true
			return g.srv.AddTool(server.Tool{
				// The upstream judges its own arguments: it may read its
				// schema otherwise than this server would, and take some
				// from elsewhere (a key in _meta).
				Unchecked: true,
				Name:      name, Title: t.Title, Description: t.Description,
				InputSchema: t.InputSchema, OutputSchema: t.OutputSchema,
				Annotations: t.Annotations, Meta: upstreamMeta(t.Meta),
				Policy: sp,
			}, l.forwardTool(t.Name, tp, upTasks, l.planner(tp)), policies...)
		},
		remove: func(name string) { g.srv.RemoveTool(name) },
	}, tools)
}

// mirroredTask is whether the gateway runs a tool as a task of its own
// when the policy does not say, from what the upstream declared of it. A
// tool a 2025-era upstream runs as a task — only, or when asked — may be
// one downstream: a client that takes a task gets one of the gateway's,
// and a client that cannot still gets a call's result, the upstream's
// task followed within the call's clocks. A keyed tool's task must be
// required (its key makes the task's creation idempotent, in the
// ledger's transaction), so one the upstream runs only as a task is a
// task downstream for every client; one it runs as a task when asked is
// a plain call. A 2026-07-28 upstream decides per call, so its tools are
// tasks downstream only where the policy makes them so.
func mirroredTask(up upstreamTasks, tp ToolPolicy, era mcp.Era) *taskserver.Policy {
	keyed := tp.Keyed != nil
	switch {
	case up == upstreamTaskRequired && keyed:
		return &taskserver.Policy{Required: true}
	case up == upstreamTaskRequired, up == upstreamTaskOptional && era == mcp.Legacy && !keyed:
		return &taskserver.Policy{}
	}
	return nil
}

// serveAgain serves again what l last listed, as l is named and the
// policy reads now; force registers every tool again, unchanged or not.
// A retired link's entries are all removed.
func (g *Gateway) serveAgain(l *link, force bool) {
	how := serving{again: true, force: force}
	g.syncTools(l, nil, how)
	g.syncPrompts(l, nil, serving{again: true})
	g.syncResources(l, nil, serving{again: true})
	g.syncTemplates(l, nil, serving{again: true})
}

// syncPrompts serves l's prompts, named as its tools are.
func (g *Gateway) syncPrompts(l *link, prompts []mcp.Prompt, how serving) {
	serveListing(g, l, listing[mcp.Prompt]{
		what: "prompt", entries: g.catalog.prompts, last: &l.listing.prompts, how: how,
		names: func(p mcp.Prompt) (string, string) { return p.Name, l.downstreamName(p.Name) },
		add: func(name string, p mcp.Prompt) error {
			up := p.Name
			p.Name = name
			return g.srv.AddPrompt(p, l.forwardPrompt(up))
		},
		remove: func(name string) { g.srv.RemovePrompt(name) },
	}, prompts)
}

// syncResources serves l's resources under their own URIs.
func (g *Gateway) syncResources(l *link, resources []mcp.Resource, how serving) {
	serveListing(g, l, listing[mcp.Resource]{
		what: "uri", entries: g.catalog.resources, last: &l.listing.resources, how: how,
		names:  func(r mcp.Resource) (string, string) { return r.URI, r.URI },
		add:    func(_ string, r mcp.Resource) error { return g.srv.AddResource(r, l.forwardRead()) },
		remove: func(uri string) { g.srv.RemoveResource(uri) },
	}, resources)
}

// syncTemplates serves l's resource templates under their own URIs.
func (g *Gateway) syncTemplates(l *link, templates []mcp.ResourceTemplate, how serving) {
	serveListing(g, l, listing[mcp.ResourceTemplate]{
		what: "uriTemplate", entries: g.catalog.templates, last: &l.listing.templates, how: how,
		names: func(t mcp.ResourceTemplate) (string, string) { return t.URITemplate, t.URITemplate },
		add: func(_ string, t mcp.ResourceTemplate) error {
			return g.srv.AddResourceTemplate(t, l.forwardRead())
		},
		remove: func(uri string) { g.srv.RemoveResourceTemplate(uri) },
	}, templates)
}

// upstreamKeyOf is the key the upstream is sent for tenant's call of the
// conditional tool it serves as name with key (upstreamKey); "" for a
// tool that is not conditional, or not served.
func (g *Gateway) upstreamKeyOf(tenant, name, key string) string {
	if g.policy.Load().forTool(name).Keyed == nil {
		return ""
	}
	g.mu.Lock()
	e, ok := g.catalog.tools[name]
	g.mu.Unlock()
	if !ok {
		return ""
	}
	return upstreamKey(tenant, e.up, key)
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
		if !strings.HasPrefix(k, mcp.MetaPrefix) {
			out[k] = v
		}
	}
	return out
}

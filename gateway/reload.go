package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"time"
)

// topology is the upstreams a gateway serves, in the order given, and
// whether their names carry the upstream's (several upstreams): replaced
// whole by Reload, so that a reader sees one configuration or the next,
// never a mixture.
type topology struct {
	links  []*link
	prefix bool
}

// Changes is what a Reload did, by upstream name, for its caller to log.
type Changes struct {
	// Added were started; Removed are drained, then stopped; Restarted
	// changed (a field of their Upstream differs), and are drained and
	// stopped while a new connection (or process) takes their place;
	// Unchanged kept their connection and processes as they were.
	Added, Removed, Restarted, Unchanged []string
	// PolicyChanged: the new policy differs from the one it replaced, and
	// every tool was registered again under it.
	PolicyChanged bool
}

// errReloadClosed refuses a Reload of a gateway that is closing.
var errReloadClosed = errors.New("gateway: the gateway is closed: it takes no reload")

// launch starts l's supervision, which ends with its context.
func (g *Gateway) launch(l *link) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer close(l.done)
		l.run(l.ctx)
	}()
}

// Reload applies a new set of upstreams and a new policy to a running
// gateway, as a restart with them would, without ending what is
// unchanged: the way `mcprel gateway --config FILE` rereads its file on
// SIGHUP.
//
// The upstreams are checked as CheckUpstreams checks them and the policy
// as New checks it (a conditional tool needs Options.Ledger, a task
// Options.Tasks); a reload refused leaves everything as it was. An
// upstream is matched to the running one of the same name: one whose
// Upstream is the same in every field (command, arguments, environment,
// URL, headers, limits, capabilities, per-tenant processes, kept names;
// an Authorizer by identity) is left running, its connection, processes
// and tools as they are. An upstream that is new is started and
// supervised as at Start, and its tools are listed once it is up. One
// that is gone, or whose Upstream changed (a rotated credential in its
// Env or Header counts), is drained: its tools are unregistered at once,
// clients are told the list changed, no new call reaches it, and the
// calls it has in flight finish within Options.ReloadGrace; then it is
// closed: a call still in flight is cancelled upstream and fails with
// its outcome unknown (it may have acted). A changed one is started anew
// at once, as a new upstream is, beside the old connection (or process)
// while that drains: new calls need not wait for old ones.
//
// The policy applies to the calls that begin after Reload returns: when
// it differs from the running one, every tool is registered again under
// it, and a call in flight keeps the policy it began with. With one upstream names are not prefixed and
// with several they are, so a reload between the two renames every tool
// of the upstreams kept, as a restart would: each is registered again
// under its new name and clients are told the list changed. Adding or
// removing an upstream also renames a tool of the one that keeps its
// names (Upstream.KeepNames) that begins with an upstream's name and
// "_".
//
// Reload waits, as Start does, at most Options.StartWait (or until ctx
// ends) for the upstreams it started to be listed once; one not up by
// then is listed when it comes up. Its changes stand whether it waited
// or not. Reloads are serialized; one before Start, or after Close, is
// an error.
func (g *Gateway) Reload(ctx context.Context, ups []Upstream, policy *Policy) (Changes, error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if g.closed || g.ctx.Err() != nil {
		return Changes{}, errReloadClosed
	}
	if !g.started {
		return Changes{}, errors.New("gateway: Reload before Start: give New the configuration instead")
	}
	if policy == nil {
		policy = &Policy{}
	}
	if err := policy.check(g.opts.Ledger != nil, g.opts.Tasks != nil); err != nil {
		return Changes{}, err
	}
	ups, err := CheckUpstreams(ups)
	if err != nil {
		return Changes{}, err
	}

	old := g.top.Load()
	running := map[string]*link{}
	for _, l := range old.links {
		running[l.up.Name] = l
	}
	var ch Changes
	top := &topology{prefix: len(ups) > 1}
	kept := map[*link]bool{}
	var started []*link
	for i, u := range ups {
		l, ok := running[u.Name]
		if ok && sameUpstream(&l.up, &u) {
			top.links = append(top.links, l)
			kept[l] = true
			ch.Unchanged = append(ch.Unchanged, u.Name)
			continue
		}
		nl, err := newLink(g, u, i)
		if err != nil {
			for _, s := range started {
				s.cancel(nil)
			}
			return Changes{}, err
		}
		started = append(started, nl)
		top.links = append(top.links, nl)
		if ok {
			ch.Restarted = append(ch.Restarted, u.Name)
		} else {
			ch.Added = append(ch.Added, u.Name)
		}
	}
	var retired []*link
	for _, l := range old.links {
		if kept[l] {
			continue
		}
		retired = append(retired, l)
		if !slices.ContainsFunc(ups, func(u Upstream) bool { return u.Name == l.up.Name }) {
			ch.Removed = append(ch.Removed, l.up.Name)
		}
	}
	ch.PolicyChanged = !reflect.DeepEqual(g.policy.Load(), policy)

	// From here nothing fails: the new configuration is served.
	g.mu.Lock()
	for i, l := range top.links {
		l.index = i // the earlier upstream keeps a name two list
	}
	for _, l := range retired {
		l.retired = true // a relisting under way registers nothing more
	}
	g.top.Store(top)
	g.policy.Store(policy)
	g.mu.Unlock()
	for _, l := range retired {
		g.serveAgain(l, false) // takes all of its away
	}
	for _, l := range top.links {
		if kept[l] {
			// Under the names and the policy served now; a name a
			// retired upstream held and this one lists is this one's.
			g.serveAgain(l, ch.PolicyChanged)
		}
	}
	for _, l := range started {
		g.launch(l)
	}
	for _, l := range retired {
		g.wg.Add(1)
		go g.drain(l)
	}
	g.log.Info("gateway: reloaded", "added", ch.Added, "removed", ch.Removed, "restarted", ch.Restarted,
		"unchanged", ch.Unchanged, "policy_changed", ch.PolicyChanged)

	wait := time.NewTimer(g.opts.StartWait)
	defer wait.Stop()
	for _, l := range started {
		select {
		case <-l.firstTried:
			if !l.listed() {
				g.log.Warn("gateway: an upstream the reload started could not be listed yet; serving without it until it comes up",
					"upstream", l.up.Name)
			}
		case <-wait.C:
			g.log.Warn("gateway: an upstream the reload started was not listed in time; serving without it until it comes up",
				"upstream", l.up.Name, "waited", g.opts.StartWait)
			return ch, nil
		case <-ctx.Done():
			return ch, nil
		case <-g.ctx.Done():
			return ch, nil
		}
	}
	return ch, nil
}

// drain stops a link a Reload took out, whose tools are no longer
// served: once its calls in flight are done, or Options.ReloadGrace has
// passed, or the gateway closes, its supervision ends and it is closed
// (a call still in flight is cancelled upstream, its outcome unknown).
func (g *Gateway) drain(l *link) {
	defer g.wg.Done()
	grace := time.NewTimer(g.opts.ReloadGrace)
	defer grace.Stop()
	select {
	case <-l.drained():
	case <-grace.C:
		l.mu.Lock()
		n := l.inflight
		l.mu.Unlock()
		l.log.Warn("gateway: the reload's grace passed with calls of a removed or changed upstream in flight; closing it, and they fail",
			"in_flight", n, "grace", g.opts.ReloadGrace)
	case <-g.ctx.Done():
	}
	l.cutOff(errClosing) // calls still in flight end, cancelled upstream
	l.cancel(errClosing) // and held calls and followed tasks, as at Close
	<-l.done
	if err := l.close(); err != nil {
		l.log.Warn("gateway: closing a removed or changed upstream", "err", err)
	}
	l.log.Info("gateway: upstream stopped after a reload")
	g.obs.UpstreamEvent(UpstreamEvent{Upstream: l.up.Name, Kind: EventStopped})
}

// drained is closed once no call is in flight to the upstream.
func (l *link) drained() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if l.idle == nil {
		l.idle = make(chan struct{})
	}
	return l.idle
}

// sameUpstream reports whether a and b (both checked) are the same in
// every field, so that a running upstream may stay as it is: a
// credential rotated in Env or Header is a change. An Authorizer is
// compared by identity, and one whose type cannot be compared is always
// a change.
func sameUpstream(a, b *Upstream) bool {
	return a.Name == b.Name && a.Transport == b.Transport &&
		slices.Equal(a.Command, b.Command) && slices.Equal(a.Env, b.Env) &&
		a.URL == b.URL && sameHeader(a.Header, b.Header) &&
		sameAuthorizer(a.Authorizer, b.Authorizer) && a.AuthorizationAction == b.AuthorizationAction &&
		a.PerTenant == b.PerTenant && a.Limits == b.Limits &&
		sameCapabilities(a, b) && a.KeepNames == b.KeepNames
}

func sameHeader(a, b map[string][]string) bool {
	return len(a) == len(b) && maps.EqualFunc(a, b, slices.Equal)
}

func sameAuthorizer(a, b any) (same bool) {
	defer func() {
		if recover() != nil {
			same = false // a comparable type holding one that is not
		}
	}()
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

func sameCapabilities(a, b *Upstream) bool {
	if a.Capabilities == nil || b.Capabilities == nil {
		return a.Capabilities == nil && b.Capabilities == nil
	}
	ja, errA := json.Marshal(a.Capabilities)
	jb, errB := json.Marshal(b.Capabilities)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

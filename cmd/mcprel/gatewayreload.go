package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/oauthstore"
)

// watchEvery is how often --watch reads the file for a change.
const watchEvery = time.Second

// gatewayReloader reloads a running gateway's --config file on SIGHUP
// (and, with --watch, when the file changes): it plans the gateway anew
// from the same command line and the file as it is now and, when that
// plan holds, applies its upstreams and policy to the running gateway.
// A file that fails to load is refused, the reason logged, and the
// running configuration kept. Settings that only a restart can change
// (the listener, the database, tokens, server-wide limits) are logged as
// such, and left as they run.
type gatewayReloader struct {
	args []string
	opts *host.Options
	rt   *host.Runtime
	log  *slog.Logger

	mu          sync.Mutex
	current     *gatewayPlan
	tokens      *oauthstore.Store // the stored logins, once a plan needed them
	closeTokens func()            // closes the store of stored logins if a reload opened it
}

// run reloads on every SIGHUP hup delivers, and with watch whenever the
// file's content changes, until ctx ends. --watch reads the config file
// only: a change to a file it names (the policy, a token file) is read
// at the next reload, which SIGHUP makes.
func (r *gatewayReloader) run(ctx context.Context, hup <-chan os.Signal, watch bool) {
	// A reload waits for the gateway to start: signals meanwhile are
	// kept (coalesced) and the file's changes measured from what the
	// start read.
	select {
	case <-r.rt.Gateway().Started():
	case <-ctx.Done():
		return
	}
	var tick <-chan time.Time
	last := r.current.cfg.sum
	if watch {
		t := time.NewTicker(watchEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			last = r.fileSum()
			r.reload(ctx, "SIGHUP")
		case <-tick:
			sum := r.fileSum()
			if sum == last {
				continue
			}
			last = sum
			r.reload(ctx, "the file changed")
		}
	}
}

// fileSum is a digest of the config file's content; empty when it cannot
// be read (a reload then says why).
func (r *gatewayReloader) fileSum() string {
	data, err := readSmallFile(r.current.cfg.path, maxGatewayConfig)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return string(sum[:])
}

// reload applies the file as it is now, or keeps the running
// configuration and logs why not.
func (r *gatewayReloader) reload(ctx context.Context, why string) {
	err := r.apply(ctx, why)
	if err != nil {
		r.log.Error("gateway: reload refused; the running configuration is kept", "file", r.current.cfg.path, "trigger", why, "reason", err.Error())
	}
}

func (r *gatewayReloader) apply(ctx context.Context, why string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := planGateway(r.args, io.Discard, io.Discard, environLookup)
	if err != nil {
		return err
	}
	// The runtime's own settings are checked as at start, but only the
	// upstreams and the policy take effect: the rest is how the process
	// listens, stores and authenticates, which a restart changes.
	nextOpts, err := next.rf.options(ctx, next.fs, strings.NewReader(""), io.Discard, io.Discard)
	if err != nil {
		return next.cfg.annotate(err)
	}
	next.rf.logs.Close()
	if nextOpts.FlushTraces != nil {
		nextOpts.FlushTraces(ctx)
	}
	policy, scopes, err := next.policy(r.opts)
	if err != nil {
		return next.cfg.annotate(err)
	}
	for _, v := range tokenVars(next.tokenEnv) {
		if !strings.HasPrefix(v, "MCPREL_") && !slices.Contains(r.opts.Gateway.HideEnv, v) {
			// Every stdio upstream inherits the gateway's environment
			// less the variables hidden at start: one started now would
			// see this HTTP upstream's token.
			return fmt.Errorf("gateway: token-env %s is new: the variables that hold upstreams' tokens are hidden from stdio upstreams as the gateway starts, so a new one takes effect only at a restart: restart the gateway to apply this file", v)
		}
	}
	if fmt.Sprint(scopes) != fmt.Sprint(r.opts.ToolScopes) {
		// The scopes are checked before a request reaches the gateway,
		// by the listener, which a reload does not rebuild: a policy
		// that changed them would run with the old ones.
		return fmt.Errorf("gateway: the policy's auth scopes changed, which take effect only at a restart: restart the gateway to apply this file")
	}
	// An upstream whose OAuth is as it was keeps its Authorizer (and
	// so its tokens, and its connection: a new Authorizer would make
	// it a changed upstream, drained and restarted).
	fresh := map[string]*upstreamOAuth{}
	for name, o := range next.oauthUps {
		old, was := r.current.oauthUps[name]
		if cur := r.current.byName[name]; was && *old == *o && cur != nil && cur.URL == next.byName[name].URL {
			next.byName[name].Authorizer, next.byName[name].AuthorizationAction = cur.Authorizer, cur.AuthorizationAction
			continue
		}
		fresh[name] = o
	}
	// One store of stored logins for the process: the one opened at
	// start, or by the first reload that needed one.
	next.upOAuth.tokens = r.tokens
	closeOAuth, err := next.upOAuth.apply(ctx, fresh, next.byName, r.opts.DB)
	if err != nil {
		closeOAuth()
		return next.cfg.annotate(err)
	}
	changes, err := r.rt.ReloadGateway(ctx, next.ups, policy)
	if err != nil {
		closeOAuth()
		return err
	}
	// Only now is a store this reload opened the process's: a reload
	// refused above closed it.
	if r.tokens == nil && next.upOAuth.tokens != nil {
		r.tokens, r.closeTokens = next.upOAuth.tokens, closeOAuth
	}
	if restart := restartOnly(r.current, next); len(restart) > 0 {
		r.log.Warn("gateway: reload: these settings changed in the file and take effect at the next restart", "settings", strings.Join(restart, ", "))
	}
	r.current = next
	// The gateway logs what changed ("gateway: reloaded").
	r.log.Info("gateway: config file applied", "file", next.cfg.path, "trigger", why, "upstreams", len(next.ups),
		"restarted", len(changes.Restarted))
	return nil
}

// restartOnly names the settings the reloaded file changed that only a
// restart applies: every flag of the runtime's own whose value differs.
func restartOnly(old, next *gatewayPlan) []string {
	var names []string
	next.fs.VisitAll(func(f *flag.Flag) {
		if upstreamFlagKey(f.Name) != "" || f.Name == "policy" || f.Name == "upstream" || f.Name == "mcp-config" || configOnlyFlags[f.Name] != "" {
			return
		}
		if of := old.fs.Lookup(f.Name); of != nil && of.Value.String() != f.Value.String() {
			names = append(names, f.Name)
		}
	})
	slices.Sort(names)
	return names
}

// closeAll closes what reloads opened.
func (r *gatewayReloader) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closeTokens != nil {
		r.closeTokens()
	}
}

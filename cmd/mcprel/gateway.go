package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/internal/argv"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/oauthstore"
	"github.com/mcprel/mcprel/review"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
)

// maxSecretFile bounds a credentials file (a token, headers, an
// environment) and a policy file: they are read whole.
const maxSecretFile = 64 << 10

// gatewayCmd is "mcprel gateway": any MCP server, unmodified, behind
// mcprel's lifecycle. It parses its flags into host.Options with a
// gateway (package gateway), and runs the runtime package host
// assembles, as serve does.
func gatewayCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "login" {
		return gatewayLoginCmd(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "wrap" {
		return gatewayWrapCmd(args[1:], stdout, stderr)
	}
	p, err := planGateway(args, stdout, stderr, environLookup)
	if err != nil {
		return err
	}
	if *p.check {
		return p.printCheck(stdout)
	}
	var hup chan os.Signal
	if p.cfg != nil {
		// Caught from now on: a SIGHUP while the upstreams start must
		// reload, not end the process as it would by default.
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	opts, err := p.rf.options(ctx, p.fs, stdin, stdout, stderr)
	if err != nil {
		return p.cfg.annotate(err)
	}
	closeOAuth, err := p.upOAuth.apply(ctx, p.oauthUps, p.byName, opts.DB)
	if err != nil {
		return p.cfg.annotate(err)
	}
	defer closeOAuth()
	policy, scopes, err := p.policy(opts)
	if err != nil {
		return p.cfg.annotate(err)
	}
	opts.ToolScopes = scopes
	opts.Implementation.Name = "mcprel-gateway"
	opts.Gateway = &gateway.Options{Upstreams: p.ups, Policy: policy, MaxSessions: *p.maxSessions, InputWait: *p.inputWait,
		// An upstream's answer is bounded as a client's message is.
		Client:  client.Options{MaxMessageBytes: p.rf.limits.maxMessage},
		HideEnv: tokenVars(p.tokenEnv),
		// An upstream a reload removes finishes its calls as a
		// shutdown would let it.
		ReloadGrace: max(*p.rf.grace, time.Second),
	}
	rt, ctx, stop, err := p.rf.start(ctx, opts, stderr)
	if err != nil {
		return err
	}
	defer stop()
	if p.cfg != nil {
		r := &gatewayReloader{args: args, opts: opts, rt: rt, current: p, log: opts.Server.Logger, tokens: p.upOAuth.tokens}
		defer r.closeAll()
		go r.run(ctx, hup, *p.watch)
	}
	return rt.Run(ctx)
}

// gatewayPlan is what the gateway's command line and --config file say,
// checked, before anything opens or starts: --check prints it, and a
// reload makes a new one from the same command line and the file as it
// is then.
type gatewayPlan struct {
	fs       *flag.FlagSet
	rf       runtimeFlags
	cfg      *gatewayConfig // nil without --config
	ups      []gateway.Upstream
	byName   map[string]*gateway.Upstream
	upOAuth  upstreamOAuthFlags
	oauthUps map[string]*upstreamOAuth
	tokenEnv listFlag

	policyName string // the policy's file, or the config file when inline
	policyData []byte

	maxSessions  *int
	inputWait    *time.Duration
	check, watch *bool
}

// planGateway parses the gateway's command line and its --config file and
// checks every upstream and credential they name. It opens nothing.
func planGateway(args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) (*gatewayPlan, error) {
	p := &gatewayPlan{rf: runtimeFlags{cmd: "gateway"}}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	p.fs = fs
	fs.SetOutput(stdout)
	setUsage(fs, "usage: mcprel gateway --config FILE [--check] [--watch] [flags]\n       mcprel gateway --upstream NAME=COMMAND|NAME=URL [--upstream ...] | --mcp-config FILE [--stdio | --http ADDR] [flags]\n       mcprel gateway wrap [--write [--force]] [--db PATH] FILE | --undo FILE",
		`Serves the tools, resources and prompts of the MCP servers --upstream
names through mcprel's lifecycle: deadlines, cancellation, progress,
limits, honest failures, and the ledger for the keyed tools --policy
names. With one upstream its names are kept; with several, each one's
tool and prompt names become NAME_tool, the first's included, except
those of the upstream --upstream-keep-names names. --config FILE gives
every flag in a YAML (or JSON) file, by the flag's name, with the
upstreams under upstreams: (see examples/gateway/gateway.yaml); flags on
the command line override it; SIGHUP (or --watch) reloads it. Exit
status: 0 after a graceful shutdown, 1 a failure, 2 a mistake in the
command line or the file.`)
	p.rf.register(fs)
	var upstreams, tokenFile, headersFile, envFile listFlag
	fs.Var(&upstreams, "upstream", "NAME=COMMAND (a stdio server, its argv in quoted words, run without a shell), NAME=URL (a Streamable HTTP endpoint, either era) or NAME=sse:URL (the 2024-11-05 HTTP+SSE transport); repeatable: with several, every upstream's tool and prompt names become NAME_tool — the first's too, so adding a second renames the first's tools, unless --upstream-keep-names keeps them")
	fs.Var(&p.tokenEnv, "upstream-token-env", "NAME=VAR: send the bearer token in environment variable VAR to upstream NAME (HTTP)")
	fs.Var(&tokenFile, "upstream-token-file", "NAME=FILE: send the bearer token in FILE to upstream NAME (HTTP)")
	fs.Var(&headersFile, "upstream-headers-file", "NAME=FILE: send the headers in FILE (\"Header: value\" lines) to upstream NAME (HTTP)")
	fs.Var(&envFile, "upstream-env-file", "NAME=FILE: add the KEY=VALUE lines of FILE to the environment of upstream NAME (stdio)")
	p.upOAuth.register(fs)
	var perTenant, upLimits, upCaps, keepNames listFlag
	fs.Var(&keepNames, "upstream-keep-names", "NAME: with several upstreams, keep upstream NAME's tool and prompt names as it lists them, unprefixed (one upstream at most); a name of its that begins with an upstream's name and _ is prefixed all the same, so that no two meet")
	fs.Var(&upCaps, "upstream-capabilities", "NAME=LIST: what the gateway declares to 2025-era upstream NAME on a connection clients share, of elicitation, elicitation-url, sampling and roots (comma-separated), or none; default all (a client that lacks one is refused the upstream's request that needs it; declare less to have the upstream hide what needs more)")
	fs.Var(&perTenant, "upstream-per-tenant", "NAME: start one process of stdio upstream NAME per tenant (of --token), so that its requests, subscriptions and state belong to one tenant (repeatable; bounded by --max-upstream-sessions)")
	fs.Var(&upLimits, "upstream-limits", "NAME=concurrent=N,queued=N,rate=R,burst=N,bytes=N: bound the calls forwarded to upstream NAME, all its tools together, within the server's own limits (repeatable; any subset of the keys)")
	p.maxSessions = fs.Int("max-upstream-sessions", gateway.DefaultMaxSessions, "sessions (2025-era HTTP) or processes (--upstream-per-tenant) one upstream holds for tenants; past it the least recently used idle one is closed")
	p.inputWait = fs.Duration("input-wait", gateway.DefaultInputWait, "how long a call to a 2025-era upstream that asked a 2026-07-28 client for input is held open for the client's answer before it is cancelled upstream")
	mcpConfig := fs.String("mcp-config", "", "serve every server of an MCP client's configuration FILE (Claude Desktop's or .mcp.json's mcpServers, VS Code's servers) as an upstream named by its key, each character outside [A-Za-z0-9-] made -; ${env:NAME} and ${NAME} are read from the gateway's environment; --upstream adds to them")
	policyFile := fs.String("policy", "", "the tools' policy (the YAML or JSON of mcprel review): their deadlines and which are read-only; a tool it does not name is unsafe")
	configFile := fs.String("config", "", "read every setting from this YAML or JSON FILE, its keys the flags' names and upstreams: (see examples/gateway/gateway.yaml); a flag on the command line overrides the file; SIGHUP reloads it")
	p.check = fs.Bool("check", false, "with --config: check the file and the command line, print what would run (the policy's review verdicts included) and exit, starting and opening nothing")
	p.watch = fs.Bool("watch", false, "with --config: reload the file whenever it changes, as SIGHUP does")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if *configFile == "" && (*p.watch || *p.check) {
		return nil, usagef("gateway: --check and --watch need --config FILE")
	}
	if *configFile != "" {
		cfg, err := loadGatewayConfig(*configFile, fs, setFlags(fs), getenv)
		if err != nil {
			return nil, err
		}
		p.cfg = cfg
		p.ups = append(p.ups, cfg.upstreams...)
		p.policyName, p.policyData = cfg.policyName, cfg.policy
	}
	err := p.planUpstreams(upstreams, *mcpConfig, stderr, tokenFile, headersFile, envFile, perTenant, keepNames, upLimits, upCaps)
	if err != nil {
		return nil, p.cfg.annotate(err)
	}
	if *p.maxSessions < 1 {
		return nil, p.cfg.annotate(usagef("gateway: --max-upstream-sessions must be at least 1, not %d", *p.maxSessions))
	}
	if *p.inputWait <= 0 {
		return nil, p.cfg.annotate(usagef("gateway: --input-wait must be positive, not %v", *p.inputWait))
	}
	if *policyFile != "" {
		data, err := readSmallFile(*policyFile, maxSecretFile)
		if err != nil {
			return nil, p.cfg.annotate(usagef("gateway: --policy: %v", err))
		}
		p.policyName, p.policyData = *policyFile, data
	}
	return p, nil
}

// planUpstreams gathers the upstreams of --mcp-config, the file and
// --upstream, and gives them what the per-upstream flags say.
func (p *gatewayPlan) planUpstreams(upstreams listFlag, mcpConfig string, stderr io.Writer, tokenFile, headersFile, envFile, perTenant, keepNames, upLimits, upCaps listFlag) error {
	if mcpConfig != "" {
		ups, err := mcpConfigUpstreams(mcpConfig, stderr)
		if err != nil {
			return err
		}
		p.ups = append(p.ups, ups...)
	}
	if len(upstreams) > 0 || len(p.ups) == 0 {
		more, err := parseUpstreams(upstreams)
		if err != nil {
			return err
		}
		p.ups = append(p.ups, more...)
	}
	ups := p.ups
	if _, err := gateway.CheckUpstreams(ups); err != nil {
		return usagef("gateway: %s", strings.TrimPrefix(err.Error(), "gateway: "))
	}
	byName := map[string]*gateway.Upstream{}
	for i := range ups {
		byName[ups[i].Name] = &ups[i]
	}
	p.byName = byName
	if err := applyCredentials(byName, p.tokenEnv, tokenFile, headersFile, envFile); err != nil {
		return err
	}
	var err error
	if p.oauthUps, err = p.upOAuth.parse(byName); err != nil {
		return err
	}
	for _, name := range perTenant {
		u := byName[name]
		switch {
		case u == nil:
			return usagef("gateway: --upstream-per-tenant names upstream %q, which no --upstream defines", name)
		case u.Transport != gateway.Stdio:
			return usagef("gateway: --upstream-per-tenant %s: it is an HTTP upstream, which has a session per tenant already", name)
		}
		u.PerTenant = true
	}
	for _, name := range keepNames {
		u := byName[name]
		if u == nil {
			return usagef("gateway: --upstream-keep-names names upstream %q, which no --upstream defines", name)
		}
		u.KeepNames = true
	}
	if _, err := gateway.CheckUpstreams(ups); err != nil {
		return usagef("gateway: --upstream-keep-names: %s", strings.TrimPrefix(err.Error(), "gateway: "))
	}
	for _, v := range upLimits {
		name, spec, _ := strings.Cut(v, "=")
		u := byName[name]
		if u == nil {
			return usagef("gateway: --upstream-limits names upstream %q, which no --upstream defines", name)
		}
		if u.Limits, err = parseLimits(spec); err != nil {
			return usagef("gateway: --upstream-limits %s: %v", name, err)
		}
	}
	for _, v := range upCaps {
		name, list, _ := strings.Cut(v, "=")
		u := byName[name]
		if u == nil {
			return usagef("gateway: --upstream-capabilities names upstream %q, which no --upstream defines", name)
		}
		if u.Capabilities, err = parseCapabilities(list); err != nil {
			return usagef("gateway: --upstream-capabilities %s: %v", name, err)
		}
	}
	return nil
}

// reviewPolicy parses the plan's policy; nil without one.
func (p *gatewayPlan) reviewPolicy() (*review.Policy, error) {
	if p.policyData == nil {
		return nil, nil
	}
	rp, err := review.Parse(p.policyName, p.policyData)
	if err != nil {
		return nil, usagef("gateway: --policy: %v", err)
	}
	return rp, nil
}

// checkPolicyNames refuses a policy operation no tool of this gateway can
// be named: with several upstreams, and none keeping its names, every
// tool is served as UPSTREAM_tool, and a policy naming "send_email"
// would silently leave the tool unsafe — a keyed tool unkeyed, a retry
// run twice. (A reload from one upstream to several would do the same
// to a running policy; it is refused with this.)
func (p *gatewayPlan) checkPolicyNames(rp *review.Policy) error {
	if len(p.ups) < 2 || slices.ContainsFunc(p.ups, func(u gateway.Upstream) bool { return u.KeepNames }) {
		return nil
	}
	for _, op := range rp.Operations {
		if !slices.ContainsFunc(p.ups, func(u gateway.Upstream) bool { return strings.HasPrefix(op.Name, u.Name+"_") }) {
			return usagef("gateway: --policy %s: operation %q names no tool this gateway serves: with several upstreams every tool is served as UPSTREAM_tool (%s_%s, say); name it so, or keep one upstream's names (--upstream-keep-names, keep-names: true)",
				p.policyName, op.Name, p.ups[0].Name, op.Name)
		}
	}
	return nil
}

// policy is the gateway's policy for the runtime opts describe, and the
// scopes its operations need: a policy that names scopes needs OAuth.
func (p *gatewayPlan) policy(opts *host.Options) (*gateway.Policy, map[string][]string, error) {
	rp, err := p.reviewPolicy()
	if err != nil || rp == nil {
		return nil, nil, err
	}
	if err := p.checkPolicyNames(rp); err != nil {
		return nil, nil, err
	}
	policy, err := gateway.PolicyFromReview(rp, p.rf.gatewayFacts(opts))
	if err != nil {
		return nil, nil, usagef("gateway: --policy %s: %v", p.policyName, strings.TrimPrefix(err.Error(), "gateway: "))
	}
	var scopes map[string][]string
	for _, op := range rp.Operations {
		if len(op.Auth.Scopes) == 0 {
			continue
		}
		if opts.OAuth == nil {
			return nil, nil, usagef("gateway: --policy %s: operation %q needs the scopes %s, which only OAuth access tokens carry: give --oauth-issuer", p.policyName, op.Name, strings.Join(op.Auth.Scopes, " "))
		}
		if scopes == nil {
			scopes = map[string][]string{}
		}
		scopes[op.Name] = op.Auth.Scopes
	}
	return policy, scopes, nil
}

// gatewayFacts are what this gateway decides of every tool it forwards,
// for its policy to be completed and reviewed as it runs.
func (f *runtimeFlags) gatewayFacts(opts *host.Options) gateway.Facts {
	facts := gateway.Facts{Transport: "stdio", Store: "sqlite", KeepAlive: *f.keepAlive}
	if *f.httpAddr != "" {
		facts.Transport = "streamable-http"
	}
	if store.IsPostgres(opts.DB) {
		facts.Store = "postgres"
	}
	return facts
}

// parseCapabilities reads --upstream-capabilities' list.
func parseCapabilities(list string) (*mcp.ClientCapabilities, error) {
	caps := &mcp.ClientCapabilities{}
	if list == "none" {
		return caps, nil
	}
	var modes []string
	for _, c := range strings.Split(list, ",") {
		switch c {
		case "elicitation":
			modes = append(modes, `"form":{}`)
		case "elicitation-url":
			modes = append(modes, `"url":{}`)
		case "sampling":
			caps.Sampling = json.RawMessage(`{}`)
		case "roots":
			caps.Roots = json.RawMessage(`{}`)
		default:
			return nil, fmt.Errorf("%q is not one of elicitation, elicitation-url, sampling, roots (or none alone)", c)
		}
	}
	if len(modes) > 0 {
		caps.Elicitation = json.RawMessage("{" + strings.Join(modes, ",") + "}")
	}
	return caps, nil
}

// tokenVars are the variables --upstream-token-env names: an HTTP
// upstream's token, which no stdio upstream inherits.
func tokenVars(flags []string) []string {
	var vars []string
	for _, f := range flags {
		if _, v, ok := strings.Cut(f, "="); ok {
			vars = append(vars, v)
		}
	}
	return vars
}

// parseUpstreams reads the --upstream flags.
func parseUpstreams(flags []string) ([]gateway.Upstream, error) {
	if len(flags) == 0 {
		return nil, usagef("gateway: name at least one upstream: --upstream NAME=COMMAND, --upstream NAME=URL or --mcp-config FILE")
	}
	var ups []gateway.Upstream
	for _, f := range flags {
		name, target, ok := strings.Cut(f, "=")
		if !ok || name == "" || strings.TrimSpace(target) == "" {
			return nil, usagef("gateway: --upstream wants NAME=COMMAND or NAME=URL, not %q", f)
		}
		u := gateway.Upstream{Name: name}
		switch {
		case strings.HasPrefix(target, "sse:"):
			u.Transport, u.URL = gateway.SSE, strings.TrimPrefix(target, "sse:")
		case strings.HasPrefix(target, "http://"), strings.HasPrefix(target, "https://"):
			u.Transport, u.URL = gateway.StreamableHTTP, target
		default:
			words, err := argv.Split(target)
			if err != nil {
				return nil, usagef("gateway: --upstream %s: %v", name, err)
			}
			u.Transport, u.Command = gateway.Stdio, words
		}
		ups = append(ups, u)
	}
	// Checked here, as the user typed them, rather than when the runtime
	// starts.
	if _, err := gateway.CheckUpstreams(ups); err != nil {
		return nil, usagef("gateway: %s", strings.TrimPrefix(err.Error(), "gateway: "))
	}
	return ups, nil
}

// applyCredentials gives each upstream the credentials its flags name:
// read from the environment or a file, never from the command line.
func applyCredentials(ups map[string]*gateway.Upstream, tokenEnv, tokenFile, headersFile, envFile []string) error {
	target := func(flagName, v string) (*gateway.Upstream, string, error) {
		name, arg, ok := strings.Cut(v, "=")
		if !ok || name == "" || arg == "" {
			return nil, "", usagef("gateway: --%s wants NAME=%s, not %q", flagName, map[bool]string{true: "VAR", false: "FILE"}[flagName == "upstream-token-env"], v)
		}
		u := ups[name]
		if u == nil {
			return nil, "", usagef("gateway: --%s names upstream %q, which no --upstream defines", flagName, name)
		}
		return u, arg, nil
	}
	header := func(u *gateway.Upstream, flagName string) (http.Header, error) {
		if u.Transport == gateway.Stdio {
			return nil, usagef("gateway: --%s: upstream %q is a stdio server; give its credentials with --upstream-env-file", flagName, u.Name)
		}
		if u.Header == nil {
			u.Header = http.Header{}
		}
		return u.Header, nil
	}
	for _, v := range tokenEnv {
		u, name, err := target("upstream-token-env", v)
		if err != nil {
			return err
		}
		h, err := header(u, "upstream-token-env")
		if err != nil {
			return err
		}
		tok := strings.TrimSpace(os.Getenv(name))
		if tok == "" {
			return usagef("gateway: --upstream-token-env %s: environment variable %s is empty or unset", u.Name, name)
		}
		if strings.ContainsAny(tok, "\r\n") {
			return usagef("gateway: --upstream-token-env %s: environment variable %s must hold one token on one line", u.Name, name)
		}
		h.Set("Authorization", "Bearer "+tok)
	}
	for _, v := range tokenFile {
		u, path, err := target("upstream-token-file", v)
		if err != nil {
			return err
		}
		h, err := header(u, "upstream-token-file")
		if err != nil {
			return err
		}
		data, err := readSmallFile(path, maxSecretFile)
		if err != nil {
			return usagef("gateway: --upstream-token-file %s: %v", u.Name, err)
		}
		tok := strings.TrimSpace(string(data))
		if tok == "" || strings.ContainsAny(tok, "\r\n") {
			return usagef("gateway: --upstream-token-file %s: %s must hold one token on one line", u.Name, path)
		}
		h.Set("Authorization", "Bearer "+tok)
	}
	for _, v := range headersFile {
		u, path, err := target("upstream-headers-file", v)
		if err != nil {
			return err
		}
		h, err := header(u, "upstream-headers-file")
		if err != nil {
			return err
		}
		data, err := readSmallFile(path, maxSecretFile)
		if err != nil {
			return usagef("gateway: --upstream-headers-file %s: %v", u.Name, err)
		}
		if err := parseHeaderLines(data, h); err != nil {
			return usagef("gateway: --upstream-headers-file %s: %s: %v", u.Name, path, err)
		}
	}
	for _, v := range envFile {
		u, path, err := target("upstream-env-file", v)
		if err != nil {
			return err
		}
		if u.Transport != gateway.Stdio {
			return usagef("gateway: --upstream-env-file: upstream %q is an HTTP server; give its credentials with --upstream-token-env, --upstream-token-file or --upstream-headers-file", u.Name)
		}
		data, err := readSmallFile(path, maxSecretFile)
		if err != nil {
			return usagef("gateway: --upstream-env-file %s: %v", u.Name, err)
		}
		env, err := parseEnvLines(data)
		if err != nil {
			return usagef("gateway: --upstream-env-file %s: %s: %v", u.Name, path, err)
		}
		u.Env = append(u.Env, env...)
	}
	return nil
}

// parseHeaderLines reads "Header: value" lines; blank lines and lines
// starting with # are skipped. Errors name the line, never its value: it
// is a credential.
func parseHeaderLines(data []byte, h http.Header) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" || strings.ContainsAny(k, " \t") {
			return fmt.Errorf("line %d is not \"Header: value\"", n)
		}
		switch http.CanonicalHeaderKey(k) {
		case "Host", "Content-Length", "Content-Type", "Accept", "Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id":
			return fmt.Errorf("line %d sets %s, which the gateway's client sets itself", n, k)
		}
		h.Add(k, v)
	}
	return sc.Err()
}

// parseEnvLines reads KEY=VALUE lines; blank lines and comments skipped.
func parseEnvLines(data []byte) ([]string, error) {
	var env []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, _, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("line %d is not KEY=VALUE", n)
		}
		env = append(env, line)
	}
	return env, sc.Err()
}

// parseLimits reads "concurrent=N,queued=N,rate=R,burst=N,bytes=N".
func parseLimits(spec string) (server.Limits, error) {
	var l server.Limits
	if strings.TrimSpace(spec) == "" {
		return l, errors.New("give one or more of concurrent=N, queued=N, rate=R, burst=N, bytes=N")
	}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return l, fmt.Errorf("%q is not KEY=VALUE", kv)
		}
		var err error
		var n int64
		if k != "rate" {
			n, err = strconv.ParseInt(v, 10, 64)
		}
		switch k {
		case "concurrent":
			l.MaxConcurrent = int(n)
		case "queued":
			l.MaxQueued = int(n)
		case "burst":
			l.Burst = int(n)
		case "bytes":
			l.MaxBytes = n
		case "rate":
			l.Rate, err = strconv.ParseFloat(v, 64)
			if err == nil && (math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0)) {
				err = errors.New("not a finite number")
			}
		default:
			return l, fmt.Errorf("unknown limit %q (concurrent, queued, rate, burst or bytes)", k)
		}
		if err != nil || n < 0 || l.Rate < 0 {
			return l, fmt.Errorf("%s=%s: want a number of at least 0", k, v)
		}
	}
	if l.Rate > 0 && l.Burst == 0 {
		l.Burst = max(1, int(math.Ceil(l.Rate)))
	}
	return l, nil
}

// upstreamOAuthFlags sign the gateway in to an HTTP upstream by OAuth
// with its own credentials (package client/oauth), the authorization
// server found from the upstream's 401: client credentials, or the
// authorization an operator granted once with "mcprel gateway login".
// The downstream caller's token never goes upstream.
type upstreamOAuthFlags struct {
	clientID, secretFile, login listFlag
	keyFile                     *string
	// tokens, when set, is the store of stored logins apply uses rather
	// than opening one: a reload's, the store the gateway opened at start.
	tokens *oauthstore.Store
}

func (f *upstreamOAuthFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.clientID, "upstream-oauth-client-id", "NAME=ID: sign in to HTTP upstream NAME by OAuth as client ID, registered with its authorization server (found from its 401); with --upstream-oauth-client-secret-file, by the client credentials grant")
	fs.Var(&f.secretFile, "upstream-oauth-client-secret-file", "NAME=FILE: the client secret of --upstream-oauth-client-id NAME, read from FILE (one line)")
	fs.Var(&f.login, "upstream-oauth-login", "NAME: call HTTP upstream NAME with the authorization an operator granted with \"mcprel gateway login NAME\", kept (encrypted) in the gateway's database, refreshed and rotated there by one replica at a time; the key is $"+gatewayKeyEnv+" or --key-file")
	f.keyFile = fs.String("key-file", "", "a file holding the base64 32-byte key that encrypts the upstream authorizations kept in the database (default: $"+gatewayKeyEnv+")")
}

// upstreamOAuth is one upstream's OAuth, as its flags gave it.
type upstreamOAuth struct {
	clientID, secret string
	login            bool
}

// parse checks the flags against the upstreams they name: HTTP ones
// only, and never beside a token of the operator's own.
func (f *upstreamOAuthFlags) parse(ups map[string]*gateway.Upstream) (map[string]*upstreamOAuth, error) {
	out := map[string]*upstreamOAuth{}
	get := func(flagName, name string) (*upstreamOAuth, error) {
		u := ups[name]
		switch {
		case name == "":
			return nil, usagef("gateway: --%s wants an upstream's NAME", flagName)
		case u == nil:
			return nil, usagef("gateway: --%s names upstream %q, which no --upstream defines", flagName, name)
		case u.Transport == gateway.Stdio:
			return nil, usagef("gateway: --%s: upstream %q is a stdio server; OAuth is for HTTP upstreams (give a stdio server's credentials with --upstream-env-file)", flagName, name)
		case u.Header.Get("Authorization") != "":
			return nil, usagef("gateway: --%s: upstream %q already has a token (--upstream-token-env, --upstream-token-file or an Authorization in --upstream-headers-file): give it one or OAuth, not both", flagName, name)
		}
		if out[name] == nil {
			out[name] = &upstreamOAuth{}
		}
		return out[name], nil
	}
	for _, v := range f.clientID {
		name, id, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(id) == "" {
			return nil, usagef("gateway: --upstream-oauth-client-id wants NAME=ID, not %q", v)
		}
		o, err := get("upstream-oauth-client-id", name)
		if err != nil {
			return nil, err
		}
		o.clientID = strings.TrimSpace(id)
	}
	for _, v := range f.secretFile {
		name, path, ok := strings.Cut(v, "=")
		if !ok || path == "" {
			return nil, usagef("gateway: --upstream-oauth-client-secret-file wants NAME=FILE, not %q", v)
		}
		o, err := get("upstream-oauth-client-secret-file", name)
		if err != nil {
			return nil, err
		}
		data, err := readSmallFile(path, maxSecretFile)
		if err != nil {
			return nil, usagef("gateway: --upstream-oauth-client-secret-file %s: %v", name, err)
		}
		o.secret = strings.TrimSpace(string(data))
		if o.secret == "" || strings.ContainsAny(o.secret, "\r\n") {
			return nil, usagef("gateway: --upstream-oauth-client-secret-file %s: %s must hold one secret on one line", name, path)
		}
	}
	for _, name := range f.login {
		o, err := get("upstream-oauth-login", name)
		if err != nil {
			return nil, err
		}
		o.login = true
	}
	for name, o := range out {
		switch {
		case o.secret != "" && o.clientID == "":
			return nil, usagef("gateway: --upstream-oauth-client-secret-file %s needs --upstream-oauth-client-id %s=ID", name, name)
		case !o.login && o.secret == "":
			return nil, usagef("gateway: --upstream-oauth-client-id %s: give --upstream-oauth-client-secret-file %s=FILE (client credentials), or --upstream-oauth-login %s to use the authorization an operator grants with \"mcprel gateway login %s\"", name, name, name, name)
		}
	}
	return out, nil
}

// apply gives each upstream its OAuth Authorizer. Stored authorizations
// are read from the gateway's database dsn, through a store of their own
// that close closes.
func (f *upstreamOAuthFlags) apply(ctx context.Context, oauthUps map[string]*upstreamOAuth, ups map[string]*gateway.Upstream, dsn string) (close func(), err error) {
	tokens := f.tokens
	close = func() {}
	for name, o := range oauthUps {
		u := ups[name]
		if !o.login {
			u.Authorizer, err = oauth.New(u.URL, oauth.Options{GrantType: oauth.GrantClientCredentials, ClientID: o.clientID, ClientSecret: o.secret})
			if err != nil {
				return close, usagef("gateway: upstream %s: %v", name, err)
			}
			u.AuthorizationAction = fmt.Sprintf("check the client ID and secret the gateway is given for upstream %q (--upstream-oauth-client-id, --upstream-oauth-client-secret-file) and that its authorization server grants them that upstream", name)
			continue
		}
		if tokens == nil {
			if tokens, close, err = openTokenStore(ctx, dsn, *f.keyFile, "gateway"); err != nil {
				return func() {}, err
			}
			f.tokens = tokens
		}
		action := fmt.Sprintf("authorize the gateway: run \"mcprel gateway login %s\" with this gateway's --upstream, --db and key", name)
		u.Authorizer, err = tokens.Authorizer(u.URL, storedOAuthOptions(o))
		if err != nil {
			return close, usagef("gateway: upstream %s: %v", name, err)
		}
		u.AuthorizationAction = action
	}
	return close, nil
}

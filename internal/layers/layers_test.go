// Package layers holds the architecture test: the arrows between mcprel's
// packages point down the layers of DESIGN.md, and the lifecycle imports
// no durable, metrics or tracing package.
package layers

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/mcprel/mcprel"

// layer says, for each of mcprel's packages, which of mcprel's packages it
// may import. A package missing here fails the test: place it in a layer
// first. From the ground up: wire (jsonrpc, mcp), durable (store, ledger,
// tasks), lifecycle (server), transports, policies (idempotency), client,
// assembly (host), tools, command.
var layer = map[string][]string{
	"jsonrpc": {},
	"mcp":     {"jsonrpc"},

	// Batched log output: a leaf any layer may use.
	"logbuf": {},

	"store": {},
	// The gateway's OAuth state toward its upstreams, sealed in its
	// database: client/oauth's Store on store's tables.
	"oauthstore": {"store", "client/oauth"},
	"ledger":     {"store"},
	"tasks":      {"store"},
	"outbox":     {"store", "ledger"},

	// What only transports see of the lifecycle sits under it: the
	// bounded outbound queue the lifecycle fills and a transport drains,
	// and the session contract a transport feeds. Neither knows server.
	"server/outbound": {"mcp"},
	"server/conn":     {"jsonrpc", "mcp", "server/outbound"},
	"server":          {"jsonrpc", "mcp", "server/outbound", "server/conn"},

	// The HTTP middleware (authenticators, Host/Origin checks) knows
	// net/http only, so that it sits under the transport that reads the
	// Principal it leaves in a request's context; host installs it on
	// every listener.
	"auth": {},
	// The OAuth resource server is one Authenticator: it speaks to
	// authorization servers over HTTP and knows nothing of MCP.
	"auth/oauth":   {"auth"},
	"client/oauth": {},

	"transport/stdio":      {"jsonrpc", "mcp", "server", "server/outbound", "server/conn"},
	"transport/streamhttp": {"jsonrpc", "mcp", "server", "server/outbound", "server/conn", "auth"},

	// The policies wrap a tool's handler through server's seam. One may use
	// another's exported accessors (a task is created in the ledger's
	// transaction: idempotency.Tx), never the other way round.
	"idempotency": {"jsonrpc", "mcp", "server", "ledger", "store"},
	"taskserver":  {"jsonrpc", "mcp", "server", "tasks", "idempotency"},
	"delivery":    {"jsonrpc", "mcp", "server", "idempotency", "outbox", "store"},
	"metrics":     {"jsonrpc", "mcp", "server", "client", "retry"},
	"tracing":     {"jsonrpc", "mcp", "server", "client", "retry"},

	"client": {"jsonrpc", "mcp", "retry"},
	"retry":  {"jsonrpc", "mcp"},

	// The gateway is the server in front, the client behind and the
	// policies between (the ledger's, through package idempotency): it
	// forwards through their seams and knows no transport's insides, no
	// store and no observability library. It reads client/oauth's errors
	// to tell the operator which step of its own sign-in upstream failed.
	"gateway": {"jsonrpc", "mcp", "server", "client", "client/oauth", "retry", "review", "idempotency", "ledger", "taskserver", "tasks"},

	// The operator's status page renders what narrow interfaces of its
	// own give it: it knows none of the packages that own the data, and
	// host, which does, implements them and mounts it.
	"status": {},

	// The assembly builds a whole runtime, so it may use every layer
	// below the tools; only commands, examples and tests import it
	// (TestHostOnlyAtTheTop).
	"host": {"auth", "auth/oauth", "jsonrpc", "mcp", "store", "ledger", "tasks", "outbox", "server", "transport/stdio", "transport/streamhttp",
		"idempotency", "taskserver", "metrics", "tracing", "client", "retry", "gateway", "status"},

	// The reviewer is pure: policy in, report out, no network.
	"review": {"jsonrpc", "mcp", "retry"},
	// The probe speaks the wire itself, so that it checks mcprel's server
	// and client independently of both (TestProbeKnowsNeitherEnd); it
	// reads the reviewer's policy vocabulary.
	"probe": {"jsonrpc", "mcp", "review"},

	// Commands, examples and test helpers sit on top and may use anything.
	"cmd/...":      {"..."},
	"examples/...": {"..."},
	"internal/...": {"..."},
}

// forbiddenBelowTools are third-party module paths the lifecycle, the
// durable layer and the wire must not depend on even indirectly: metrics
// and tracing belong in an observer above the server.
var forbiddenBelowTools = []string{"github.com/prometheus/", "go.opentelemetry.io/"}

// observability are the packages that are that observer, and host, which
// assembles them into a runtime: the only ones below the tools that may
// link Prometheus or OpenTelemetry.
var observability = map[string]bool{"metrics": true, "tracing": true, "host": true}

// assemblyUsers are the places that may import host: a library package
// that assembled a runtime would pull every layer, a database driver and
// both observability libraries into whoever imports it. Tests may too
// (their imports are not the package's).
var assemblyUsers = []string{"cmd/", "examples/", "internal/"}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// rule returns the imports allowed to rel, a path within the module.
func rule(rel string) ([]string, bool) {
	if allowed, ok := layer[rel]; ok {
		return allowed, true
	}
	for pattern, allowed := range layer {
		if prefix, ok := strings.CutSuffix(pattern, "/..."); ok && strings.HasPrefix(rel, prefix+"/") {
			return allowed, true
		}
	}
	return nil, false
}

func TestImportsFollowTheLayers(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) < 5 {
		t.Fatalf("go list found %d packages; run the test from the module", len(pkgs))
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		allowed, ok := rule(rel)
		if !ok {
			t.Errorf("package %s is in no layer: add it to the layer table (and DESIGN.md's)", rel)
			continue
		}
		if slices.Contains(allowed, "...") {
			continue
		}
		for _, imp := range p.Imports {
			dep, ours := strings.CutPrefix(imp, module+"/")
			if ours && !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s, against the layers: it may import only %v", rel, dep, allowed)
			}
		}
		for _, dep := range p.Deps {
			if observability[rel] {
				break
			}
			for _, bad := range forbiddenBelowTools {
				if strings.HasPrefix(dep, bad) {
					t.Errorf("%s depends on %s: metrics and tracing attach through an observer above the server", rel, dep)
				}
			}
		}
	}
}

// policies are the packages that wrap a tool's handler as a
// server.ToolInterceptor.
var policies = []string{"idempotency", "taskserver", "delivery"}

// Every policy composes through server's seam, and reaches no other
// policy's unexported internals (an internal/ package under it).
func TestPoliciesComposeThroughServer(t *testing.T) {
	byPath := map[string]pkg{}
	for _, p := range listPackages(t) {
		byPath[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = p
	}
	for _, name := range policies {
		p, ok := byPath[name]
		if !ok {
			t.Fatalf("no policy package %s", name)
		}
		if !slices.Contains(p.Imports, module+"/server") {
			t.Errorf("policy %s does not import server: a policy is a server.ToolInterceptor", name)
		}
		for _, imp := range p.Imports {
			for _, other := range policies {
				if other != name && strings.HasPrefix(imp, module+"/"+other+"/") {
					t.Errorf("policy %s imports %s, inside policy %s", name, imp, other)
				}
			}
		}
	}
}

// The lifecycle's whole dependency graph holds none of the durable layer,
// no observability and no policy: a server without a ledger links no
// database driver, and the policies plug in from above.
func TestServerLinksNoStorage(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.ImportPath != module+"/server" {
			continue
		}
		bad := []string{module + "/ledger", module + "/store", module + "/tasks", module + "/metrics", module + "/tracing",
			"modernc.org/sqlite", "github.com/jackc/pgx", "github.com/prometheus/", "go.opentelemetry.io/"}
		for _, name := range policies {
			bad = append(bad, module+"/"+name)
		}
		for _, dep := range p.Deps {
			for _, bad := range bad {
				if strings.HasPrefix(dep, bad) {
					t.Errorf("server depends on %s", dep)
				}
			}
		}
		return
	}
	t.Fatal("no server package found")
}

// Only commands, examples and test helpers import the assembly.
func TestHostOnlyAtTheTop(t *testing.T) {
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if !slices.Contains(p.Imports, module+"/host") {
			continue
		}
		if !slices.ContainsFunc(assemblyUsers, func(prefix string) bool { return strings.HasPrefix(rel, prefix) }) {
			t.Errorf("%s imports host: only commands, examples and tests assemble a runtime (%v)", rel, assemblyUsers)
		}
	}
}

// The probe knows neither mcprel's server nor its client, not even
// through another package: it checks both from outside.
func TestProbeKnowsNeitherEnd(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.ImportPath != module+"/probe" {
			continue
		}
		for _, dep := range p.Deps {
			for _, end := range []string{"server", "client", "transport/stdio", "transport/streamhttp", "gateway", "host"} {
				if dep == module+"/"+end || strings.HasPrefix(dep, module+"/"+end+"/") {
					t.Errorf("probe depends on %s: it must speak the wire itself", dep)
				}
			}
		}
		return
	}
	t.Fatal("no package probe")
}

package main

import (
	"cmp"
	"context"
	"flag"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// serveCmd is "mcprel serve": it turns its flags into host.Options,
// registers the demo tools on the runtime host.New assembles, and runs it.
// The assembly itself (store, ledger, tasks, observers, transport, the
// shutdown order) lives in package host.
func serveCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stdout)
	setUsage(fs, "usage: mcprel serve [--stdio | --http ADDR] [flags]",
		`Serves the demo tools and the ledger's over stdio (the default) or
Streamable HTTP, with the ledger in ./mcprel.db (--db another file or a
postgres:// URL). Exit status: 0 after a graceful shutdown, 1 a failure,
2 a mistake in the command line.`)
	rf := runtimeFlags{cmd: "serve"}
	rf.register(fs)
	var of outboxFlags
	of.register(fs)
	lab := fs.Bool("lab", false, "also serve the lab tools that mcprel demo drives to order events with gates (lab_hold, lab_wait, lab_release, lab_tick, lab_flood, lab_task); not for production")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opts, err := rf.options(ctx, fs, stdin, stdout, stderr)
	if err != nil {
		return err
	}
	opts.Server.Instructions = demoInstructions
	inProcess, err := of.apply(opts)
	if err != nil {
		return err
	}
	rt, ctx, stop, err := rf.start(ctx, opts, stderr)
	if err != nil {
		return err
	}
	defer stop()
	if err := startPayouts(ctx, rt, inProcess); err != nil {
		return err
	}

	srv := rt.Server()
	if err := addServeTools(srv, rt.Ledger(), rt.Dispatcher()); err != nil {
		return err
	}
	var gates *labGates
	if *lab {
		gates = newLabGates()
		if err := addLabTools(srv, gates); err != nil {
			return err
		}
	}
	if err := addReportTool(rt.Server(), rt.Tasks()); err != nil {
		return err
	}
	if gates != nil {
		if err := addLabTaskTool(rt.Tasks(), gates); err != nil {
			return err
		}
	}
	return rt.Run(ctx)
}

// setFlags returns the names of the flags the command line set.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// httpOptions checks the HTTP flags of command cmd and turns them into
// handler options.
func httpOptions(cmd, addr, path string, hosts, origins []string, authToken string, tokens []string) (*streamhttp.HandlerOptions, error) {
	if err := checkListenAddr(cmd, "--http", addr); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " {}?#") {
		return nil, usagef("%s: --path must be a URL path starting with \"/\", such as /mcp, not %q", cmd, path)
	}
	for _, o := range origins {
		if u, err := url.Parse(o); o != "*" && (err != nil || u.Scheme == "" || u.Host == "") {
			return nil, usagef("%s: --allowed-origin wants scheme://host[:port], such as https://app.example.com, not %q", cmd, o)
		}
	}
	token := cmp.Or(authToken, os.Getenv("MCPREL_AUTH_TOKEN"))
	tenants := map[string]string{}
	for _, t := range tokens {
		name, tok, ok := strings.Cut(t, "=")
		if !ok || name == "" || tok == "" {
			// Never the value: it may be the token.
			return nil, usagef("%s: --token wants TENANT=TOKEN, a tenant's name and its token (one of them is missing)", cmd)
		}
		if prev, dup := tenants[tok]; dup || tok == token {
			return nil, usagef("%s: the token of tenant %q is given twice (also for %q)", cmd, name, cmp.Or(prev, "--auth-token"))
		}
		tenants[tok] = name
	}
	return &streamhttp.HandlerOptions{
		AllowedHosts:   hosts,
		AllowedOrigins: origins,
		AuthToken:      token,
		Tokens:         tenants,
	}, nil
}

// demoInstructions are the instructions "mcprel serve" gives the model.
const demoInstructions = "mcprel demo server. echo returns its text; slow_count counts with progress and stops when cancelled. " +
	"charge_account and reserve_inventory change state: give each operation an idempotencyKey and reuse it on retries; " +
	"send_payout pays through a payment provider, once per idempotencyKey, however often it must be delivered. " +
	"get_inventory and lookup_operation are the reads to reconcile with after a timeout. " +
	"generate_report is a long job: clients that support tasks get a durable task to poll."

// newDemoServer returns a server with the tools "mcprel serve" registers
// on srv itself (the demo's and the ledger's), with l as the ledger, d as
// the outbox's dispatcher (nil: no send_payout), and opts for everything
// else.
func newDemoServer(l *ledger.Ledger, d *outbox.Dispatcher, opts *server.Options) (*server.Server, error) {
	o := *opts
	o.Instructions = demoInstructions
	srv, err := server.New(mcp.Implementation{Name: "mcprel", Version: version}, &o)
	if err != nil {
		return nil, err
	}
	if err := addServeTools(srv, l, d); err != nil {
		return nil, err
	}
	return srv, nil
}

// addServeTools registers the demo tools and the ledger's on srv, and
// send_payout when there is an outbox dispatcher d.
func addServeTools(srv *server.Server, l *ledger.Ledger, d *outbox.Dispatcher) error {
	if err := addDemoTools(srv); err != nil {
		return err
	}
	if d == nil {
		return addLedgerTools(srv, l, nil)
	}
	if err := addLedgerTools(srv, l, d.Outbox()); err != nil {
		return err
	}
	return addPayoutTool(srv, l, d)
}

// checkMetricsFlags refuses the metrics flags that cannot go together:
// a metrics token and open metrics; metrics labelled by tenant that every
// tenant's token could read.
func checkMetricsFlags(metricsToken string, open, tenantLabels bool, tokens []string) error {
	switch {
	case metricsToken != "" && open:
		return usagef("serve: choose one of --metrics-token and --metrics-open")
	case metricsToken == "" && tenantLabels && len(tokens) > 0:
		return usagef("serve: --metrics-tenants names every tenant in the metrics, which each tenant's token could then read: set --metrics-token")
	}
	return nil
}

// stdioTokens are the tokens of --auth-token (or MCPREL_AUTH_TOKEN) and
// --token over stdio, where they authenticate nothing but the metrics:
// what the operator meant to require. A --token without TENANT= is
// skipped, as is a token given twice.
func stdioTokens(authToken string, tokens []string) (string, map[string]string) {
	auth := cmp.Or(authToken, os.Getenv("MCPREL_AUTH_TOKEN"))
	tenants := map[string]string{}
	for _, t := range tokens {
		if name, tok, ok := strings.Cut(t, "="); ok && tok != "" && tok != auth {
			if _, dup := tenants[tok]; !dup {
				tenants[tok] = name
			}
		}
	}
	return auth, tenants
}

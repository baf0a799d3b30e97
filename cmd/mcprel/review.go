package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/review"
	"github.com/mcprel/mcprel/store"
)

// exitRefused is "mcprel review"'s status when an operation is not
// production ready; 0 means every one is.
const exitRefused = 20

// reviewCmd is "mcprel review": the reliability review of the operations a
// policy file describes, or of every tool a running server advertises.
func reviewCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("review", flag.ContinueOnError)
	fs.SetOutput(stdout)
	asJSON := fs.Bool("json", false, "write the report as JSON instead of Markdown")
	fromServer := fs.String("from-server", "", "review every tool of the Streamable HTTP server at this URL, from what it advertises")
	stdioCmd := fs.String("stdio", "", `review every tool of the server this command starts, over stdio ("mcprel serve --stdio")`)
	var headers listFlag
	fs.Var(&headers, "header", `with --from-server: an HTTP header to send, "Name: value" (repeatable)`)
	token := fs.String("token", "", "with --from-server: a bearer token to send (or set MCPREL_TOKEN)")
	var si signInFlags
	si.register(fs)
	asGateway := fs.Bool("gateway", false, "review POLICY as mcprel gateway --policy POLICY runs it: what the gateway decides of every tool it forwards (its ledger and what its transaction holds, flow control, SSE, reconnect, progress) is filled in, and a policy the gateway would refuse at start-up is refused here")
	gatewayDB := fs.String("db", "", "with --gateway: the gateway's --db, a SQLite file (the default) or a postgres:// URL; only which of the two is read, nothing is opened")
	passStderr := fs.Bool("server-stderr", false, "with --stdio: pass the server's stderr through as it comes; by default only its last lines are shown, when the review cannot be made")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: mcprel review POLICY [--json]
       mcprel review --gateway [--db DB] POLICY [--json]
       mcprel review --from-server URL [--json]
       mcprel review --stdio "CMD" [--json]

Reviews MCP operations for reliability: cancellation, races, deadlines,
retry class, idempotency boundary, flow control, reconnects and Tasks.
POLICY is a YAML or JSON file (docs/review.md). A --from-server that
asks for OAuth credentials is signed in to first, as "mcprel call" does.
Exit status: 0 every operation is production ready, 20 at least one is
refused, 1 the policy is invalid, the server unreachable or the sign-in
failed, 2 a mistake in the command line.

Flags:
`)
		fs.PrintDefaults()
	}
	// The policy file may come before or after the flags.
	positional, err := parseArgs(fs, args, "")
	if err != nil {
		return err
	}
	sources := 0
	for _, set := range []bool{len(positional) > 0, *fromServer != "", *stdioCmd != ""} {
		if set {
			sources++
		}
	}
	switch {
	case len(positional) > 1:
		return usagef("review: one policy file at a time, not %q", positional)
	case sources != 1:
		return usagef("review: give exactly one of POLICY, --from-server URL and --stdio \"CMD\"")
	case (len(headers) > 0 || *token != "") && *fromServer == "":
		return usagef("review: --header and --token apply to --from-server only")
	case *passStderr && *stdioCmd == "":
		return usagef("review: --server-stderr applies to --stdio only")
	case *asGateway && len(positional) == 0:
		return usagef("review: --gateway reviews a POLICY file, as the gateway runs it")
	case *gatewayDB != "" && !*asGateway:
		return usagef("review: --db applies to --gateway only")
	case si.given(fs) && (*fromServer == "" || *token != "" || os.Getenv("MCPREL_TOKEN") != ""):
		return usagef("review: %v", errNoSignIn)
	}
	if *fromServer != "" {
		if err := checkEndpoint("review", "--from-server", *fromServer); err != nil {
			return err
		}
	}

	var policy *review.Policy
	if len(positional) == 1 {
		data, err := os.ReadFile(positional[0])
		if err != nil {
			return fmt.Errorf("review: %w", err)
		}
		if policy, err = review.Parse(positional[0], data); err != nil {
			return fmt.Errorf("review: %w", err)
		}
		if *asGateway {
			if err := asTheGatewayRunsIt(policy, *gatewayDB); err != nil {
				return fmt.Errorf("review: %s: %s", positional[0], strings.TrimPrefix(err.Error(), "gateway: "))
			}
		}
	} else {
		// A stdio server's log is kept, not passed through, and its end
		// shown only when the server could not be reviewed.
		var tail *stderrTail
		serverStderr := stderr
		if *stdioCmd != "" && !*passStderr {
			tail = &stderrTail{}
			serverStderr = tail
		}
		var err error
		if policy, err = policyFromServer(ctx, *fromServer, *stdioCmd, headers, *token, &si, serverStderr); err != nil {
			var ue usageError
			if tail != nil && !errors.As(err, &ue) {
				tail.show(stderr)
			}
			return err
		}
	}
	report := review.Review(policy)
	if *asJSON {
		if err := printJSON(stdout, report); err != nil {
			return err
		}
	} else if err := report.Markdown(stdout); err != nil {
		return err
	}
	if report.Verdict != review.ProductionReady {
		return &exitError{exitRefused, ""}
	}
	return nil
}

// asTheGatewayRunsIt completes policy with what a gateway on db decides
// of every tool it forwards, after refusing what the gateway would refuse
// to start with.
func asTheGatewayRunsIt(policy *review.Policy, db string) error {
	facts := gateway.DefaultFacts
	if store.IsPostgres(db) {
		facts.Store = "postgres"
	}
	if _, err := gateway.PolicyFromReview(policy, facts); err != nil {
		return err
	}
	return facts.Complete(policy)
}

// policyFromServer connects to the server and builds the policy of its
// tools from their advertisement.
func policyFromServer(ctx context.Context, endpoint, command string, headers []string, token string, si *signInFlags, stderr io.Writer) (*review.Policy, error) {
	given, err := parseHeaders("review", headers)
	if err != nil {
		return nil, err
	}
	opts := &client.Options{Info: mcp.Implementation{Name: "mcprel-review", Version: version}, Header: given}
	if t := firstNonEmpty(token, os.Getenv("MCPREL_TOKEN")); t != "" && endpoint != "" {
		opts.Header.Set("Authorization", "Bearer "+t)
	}
	var c *client.Client
	s := review.Server{Transport: "stdio"}
	if endpoint != "" {
		s.Transport, s.Loopback = "streamable-http", isLoopback(endpoint)
		if usesSignIn(endpoint, opts.Header) {
			in, err := newSignIn("review", endpoint, si, stderr)
			if err != nil {
				return nil, err
			}
			defer in.Close()
			if _, err := in.first(ctx, opts.Header, false); err != nil {
				return nil, fmt.Errorf("review: %s", strings.TrimPrefix(err.Error(), "client: "))
			}
			opts.Authorizer = in.oc
		}
		c, err = client.DialHTTP(ctx, endpoint, opts)
	} else {
		var words []string
		if words, err = splitCommand(command); err != nil {
			return nil, usagef("review: --stdio: %v", err)
		}
		if len(words) == 0 {
			return nil, usagef("review: --stdio needs a command")
		}
		opts.Stderr = stderr
		c, err = client.DialStdio(ctx, words, opts)
	}
	if err != nil {
		if nf := notFoundAt("review", endpoint, err); nf != nil {
			return nil, nf
		}
		return nil, fmt.Errorf("review: connecting: %w", err)
	}
	defer c.Close()
	if s.Tools, err = c.ListTools(ctx); err != nil {
		return nil, fmt.Errorf("review: tools/list: %w", err)
	}
	if len(s.Tools) == 0 {
		name := "the server"
		if info := c.ServerInfo(); info != nil {
			name = info.Name
		}
		return nil, fmt.Errorf("review: %s lists no tools", name)
	}
	return review.FromTools(s), nil
}

// isLoopback reports whether an endpoint URL names a loopback host, where
// no proxy can buffer the stream.
func isLoopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

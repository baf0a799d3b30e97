package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/mcprel/mcprel/internal/argv"
	"github.com/mcprel/mcprel/probe"
	"github.com/mcprel/mcprel/review"
)

// exitProbeFailed is "mcprel probe"'s status when a fixture failed; 0
// means every applicable one passed, 1 that the server could not be
// reached.
const exitProbeFailed = 21

// probeCmd is "mcprel probe": the reliability fixtures, run live against
// any MCP server.
func probeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stdout)
	stdioCmd := fs.String("stdio", "", `the server to start and probe over stdio, as one command line ("mcprel serve --stdio"); each fixture starts it afresh`)
	url := fs.String("url", "", "the Streamable HTTP endpoint to probe (http://127.0.0.1:PORT/mcp)")
	policyFile := fs.String("policy", "", "a policy in mcprel review's vocabulary naming the tools the probe may call, and how (their probe sections); without one, only protocol methods are sent")
	asJSON := fs.Bool("json", false, "write the report as JSON")
	junit := fs.String("junit", "", "also write the report as JUnit XML to this file")
	only := fs.String("only", "", "run only these fixtures, by number (\"1,5,7\")")
	var headers listFlag
	fs.Var(&headers, "header", `with --url: an HTTP header to send, "Name: value" (repeatable)`)
	token := fs.String("token", "", "with --url: a bearer token to send (or set MCPREL_TOKEN)")
	var si signInFlags
	si.register(fs)
	var timing probe.Timing
	fs.DurationVar(&timing.Answer, "answer-wait", 0, "how long a request may take to be answered (default 5s)")
	fs.DurationVar(&timing.Deadline, "deadline-wait", 0, "the longest wait for a stalled call to end on the server's side (default 20s)")
	fs.DurationVar(&timing.Keepalive, "keepalive-wait", 0, "the longest wait for a keepalive comment on a quiet SSE stream (default 20s)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: mcprel probe (--stdio "CMD" | --url URL) [--policy FILE] [--json | --junit FILE]

Runs the reliability fixtures against a running MCP server, in every
protocol era it speaks, and reports each as passed, failed (with the
frames that prove it) or not applicable (with why):

  %s

A server that asks for OAuth credentials is signed in to first, as
"mcprel call" does (mcprel login URL does it ahead of time).

Exit status: 0 every applicable fixture passed, 21 at least one failed
(or the server died), 1 the server could not be reached or the sign-in
failed, 2 a mistake in the command line.

Flags:
`, strings.Join(probe.Fixtures(), "\n  "))
		fs.PrintDefaults()
	}
	positional, err := parseArgs(fs, args, "")
	if err != nil {
		return err
	}
	switch {
	case len(positional) > 0:
		return usagef("probe: unexpected argument %q", positional[0])
	case (*stdioCmd == "") == (*url == ""):
		return usagef("probe: give exactly one of --stdio and --url")
	case (len(headers) > 0 || *token != "") && *url == "":
		return usagef("probe: --header and --token apply to --url only")
	case timing.Answer < 0 || timing.Deadline < 0 || timing.Keepalive < 0:
		return usagef("probe: waits must be positive")
	}
	opts := &probe.Options{Timing: timing}
	if *stdioCmd != "" {
		words, err := argv.Split(*stdioCmd)
		if err != nil || len(words) == 0 {
			return usagef("probe: --stdio %q: %v", *stdioCmd, err)
		}
		opts.Target.Command = words
	} else {
		if err := checkEndpoint("probe", "--url", *url); err != nil {
			return err
		}
		opts.Target.URL = *url
		if opts.Target.Header, err = parseHeaders("probe", headers); err != nil {
			return err
		}
		if t := firstNonEmpty(*token, os.Getenv("MCPREL_TOKEN")); t != "" {
			opts.Target.Header.Set("Authorization", "Bearer "+t)
		}
	}
	if si.given(fs) && !usesSignIn(*url, opts.Target.Header) {
		return usagef("probe: %v", errNoSignIn)
	}
	if *only != "" {
		for _, f := range strings.Split(*only, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > len(probe.Fixtures()) {
				return usagef("probe: --only wants fixture numbers from 1 to %d, not %q", len(probe.Fixtures()), f)
			}
			opts.Only = append(opts.Only, n)
		}
	}
	if *policyFile != "" {
		data, err := readSmallFile(*policyFile, maxSecretFile)
		if err != nil {
			return usagef("probe: --policy: %v", err)
		}
		if opts.Policy, err = review.Parse(*policyFile, data); err != nil {
			return usagef("probe: --policy: %v", err)
		}
	}
	if usesSignIn(*url, opts.Target.Header) {
		// The fixtures send their own requests: they carry the token a
		// sign-in before them got, if the server asked for one.
		s, err := newSignIn("probe", *url, &si, stderr)
		if err != nil {
			return err
		}
		defer s.Close()
		if _, err := s.first(ctx, opts.Target.Header, false); err != nil {
			return fmt.Errorf("probe: %s", strings.TrimPrefix(err.Error(), "client: "))
		}
		if tok := s.bearer(ctx); tok != "" {
			opts.Target.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "probing %s ...\n", opts.Target.String())
	}
	report, err := probe.Run(ctx, opts)
	var ue *probe.UnreachableError
	switch {
	case errors.As(err, &ue):
		return err
	case err != nil && report == nil:
		return usagef("%v", err)
	case err != nil:
		return err
	}
	if *junit != "" {
		f, err := os.Create(*junit)
		if err != nil {
			return fmt.Errorf("probe: --junit: %w", err)
		}
		werr := report.WriteJUnit(f)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("probe: --junit: %w", werr)
		}
	}
	if *asJSON {
		if err := printJSON(stdout, report); err != nil {
			return err
		}
	} else if err := report.WriteText(stdout); err != nil {
		return err
	}
	if report.Count(probe.Failed) > 0 || len(report.Deaths) > 0 {
		return &exitError{exitProbeFailed, ""}
	}
	return nil
}

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/argv"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/metrics"
	"github.com/mcprel/mcprel/retry"
)

// Exit statuses of "mcprel call", beside the shared ones (0, 1, 2): each
// says how the call ended, so that a script can decide what to do next.
const (
	exitToolError  = 10 // the tool ran and reported a failure (isError)
	exitProtocol   = 11 // the server refused the request (a JSON-RPC error, or a redirect, which is not followed)
	exitIdle       = 12 // the idle deadline fired: no progress for --idle
	exitMax        = 13 // the maximum deadline fired: the call ran for --max
	exitCancelled  = 14 // interrupted (Ctrl-C): the message says what became of the request
	exitOverloaded = 15 // the server refused the request for now: overloaded, rate limited, shutting down, or the key's operation still running
	exitConnection = 16 // the request was never sent (the server could not be reached), or a gateway could not reach its upstream
	exitReconcile  = 17 // the outcome is unknown: the call may or may not have taken effect
	exitSignIn     = 18 // the server wants credentials it was not given: the sign-in failed, or it refused the token given
)

// exitError ends a command with a status of its own.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// callCmd is "mcprel call": one tool call on any MCP server, with the
// client runtime's clocks, cancellation and retries.
func callCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	fs.SetOutput(stdout)
	stdioCmd := fs.String("stdio", "", `the server to start and speak to over stdio, as one command line ("mcprel serve --stdio")`)
	url := fs.String("url", "", "the Streamable HTTP endpoint to call (http://127.0.0.1:PORT/mcp)")
	var headers listFlag
	fs.Var(&headers, "header", `an HTTP header to send, "Name: value" (repeatable)`)
	token := fs.String("token", "", "a bearer token to send (or set MCPREL_TOKEN)")
	list := fs.Bool("list", false, "list the server's tools instead of calling one: each with its arguments (optional ones marked ?) and the first sentence of its description")
	asJSON := fs.Bool("json", false, "with --list: print the tools as the server lists them, as JSON, their input and output schemas included")
	argsJSON := fs.String("args", "", "the arguments as one JSON object (instead of key=value pairs)")
	idle := fs.Duration("idle", client.DefaultIdle, "the idle deadline: the longest the call may go without increasing progress;\nwith --task, the longest the task may go without news: its lastUpdatedAt advancing (a checkpoint)\nor its status or status message changing")
	maxD := fs.Duration("max", client.DefaultMax, "the maximum deadline: one clock, started once connected (and signed in, if the server asked: the sign-in is not counted), for listing the tools (done first, for the arguments' types)\nand the call together, progress or not: its retries and their waits, or with --task every poll and the result, included.\nWhen it fires the request is cancelled; after it, only cleanup: with --task, tasks/cancel (up to 5s; the task may still\ncomplete: read it with tasks/get), and closing the connection (a stdio server gets up to 2s to exit, then 2s after SIGTERM)")
	retries := fs.Int("retries", 2, "retries after the first attempt, for calls the retry rules allow")
	key := fs.String("idempotency-key", "", "the operation's idempotency key, sent as arguments.idempotencyKey")
	autoKey := fs.Bool("auto-key", false, "generate an idempotency key, reused on every retry of this call, and say it on stderr before the call is sent")
	asTask := fs.Bool("task", false, "run the call as a durable task and poll it to its end")
	class := fs.String("class", "", `the tool's retry class: "safe" (no effects), "conditional" (deduplicated by its idempotency key) or "unsafe"; default: conditional with a key, unsafe without, or the server's word with --trust-server`)
	trust := fs.Bool("trust-server", false, "let the server's advertised retry class and annotations decide retries (only for a server you operate)")
	era := fs.String("era", "auto", `protocol era: "auto" (2026-07-28 if the server speaks it), "2026" or "2025"`)
	metricsFile := fs.String("metrics-file", "", "write the client's metrics (attempts, retries, late responses, ...) to this file at exit, in the Prometheus text format")
	answersFile := fs.String("answers", "", `a JSON file of answers to what the server may ask during the call, by method:
{"elicitation/create": {"action": "accept", "content": {...}}, "sampling/createMessage": {...}, "roots/list": {...}};
without it, on a terminal the questions are asked there, and otherwise declined`)
	offerRoots := fs.Bool("roots", false, "offer the working directory as the client's one root (roots/list)")
	var si signInFlags
	si.register(fs)
	passStderr := fs.Bool("server-stderr", false, "with --stdio: pass the server's stderr through as it comes; by default only its last lines are shown, when the call fails or the server dies")
	fs.Usage = func() { callUsage(fs) }
	// The tool name, its key=value arguments and the flags come in any
	// order; after "--" everything is the tool's.
	positional, err := parseArgs(fs, args, `; a tool argument that starts with "-" goes after --`)
	if err != nil {
		return err
	}
	if (*stdioCmd == "") == (*url == "") {
		return usagef("call: give exactly one of --stdio and --url")
	}
	if *url != "" {
		if err := checkEndpoint("call", "--url", *url); err != nil {
			return err
		}
	}
	if *passStderr && *stdioCmd == "" {
		return usagef("call: --server-stderr applies to --stdio only")
	}
	if *key != "" && *autoKey {
		return usagef("call: choose one of --idempotency-key and --auto-key")
	}
	if *idle <= 0 || *maxD <= 0 || *retries < 0 {
		return usagef("call: --idle and --max must be positive and --retries not negative")
	}
	opts := &client.Options{Info: mcp.Implementation{Name: "mcprel-call", Version: version}, Header: http.Header{}}
	switch *era {
	case "auto":
	case "2026":
		opts.Era = mcp.Modern
	case "2025":
		opts.Era = mcp.Legacy
	default:
		return usagef("call: --era must be auto, 2026 or 2025, not %q", *era)
	}
	given, err := parseHeaders("call", headers)
	if err != nil {
		return err
	}
	for name, values := range given {
		opts.Header[name] = append(opts.Header[name], values...)
	}
	if t := firstNonEmpty(*token, os.Getenv("MCPREL_TOKEN")); t != "" {
		opts.Header.Set("Authorization", "Bearer "+t)
	}
	if si.given(fs) && !usesSignIn(*url, opts.Header) {
		return usagef("call: %v", errNoSignIn)
	}
	answers := &answerer{term: openTerminal(stdin), out: stderr}
	if *answersFile != "" {
		if answers.file, err = readAnswers(*answersFile); err != nil {
			return usagef("call: --answers: %v", err)
		}
	}
	if *offerRoots {
		dir, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("call: --roots: %w", err)
		}
		answers.rootURI = rootOf(dir)
	}
	answers.capabilities(&opts.Capabilities)
	opts.OnRequest = answers.answer
	if *asTask {
		opts.Capabilities.Extensions = map[string]json.RawMessage{mcp.ExtensionTasks: json.RawMessage(`{}`)}
	}
	if *list && len(positional) > 0 {
		return usagef("call: --list takes no tool name, not %q", positional[0])
	}
	if !*list && len(positional) == 0 {
		return usagef("call: name the tool to call (or --list)")
	}
	if *asJSON && !*list {
		return usagef("call: --json goes with --list (a call's result is printed as JSON already)")
	}

	// The first Ctrl-C cancels the call the transport's way; a second
	// exits at once.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; !ok {
			return
		}
		fmt.Fprintln(stderr, "mcprel call: interrupted; cancelling the call (again to exit at once)")
		cancel(errInterrupted)
		if _, ok := <-sigs; ok {
			os.Exit(130)
		}
	}()

	var cm *metrics.ClientMetrics
	if *metricsFile != "" {
		reg := prometheus.NewRegistry()
		var tools []string
		if !*list {
			tools = []string{positional[0]} // the one tool the user named
		}
		if cm, err = metrics.NewClient(reg, &metrics.ClientOptions{Tools: tools}); err != nil {
			return err
		}
		opts.Interceptors = append(opts.Interceptors, cm.Interceptor())
		// Written whatever the call's end, so that a script can read
		// how it went; a file that cannot be written fails a call that
		// otherwise succeeded.
		defer func() {
			if werr := prometheus.WriteToTextfile(*metricsFile, reg); werr != nil {
				werr = fmt.Errorf("call: --metrics-file: %w", werr)
				if err == nil {
					err = werr
				} else {
					fmt.Fprintln(stderr, "mcprel", werr)
				}
			}
		}()
	}
	// A stdio server's stderr is kept, not passed through: its request
	// log would bury the call's own output. Its end is shown after the
	// server has exited (Close waits for it), when the call failed or the
	// server died on the way.
	var tail *stderrTail
	serverStderr := stderr
	if *stdioCmd != "" && !*passStderr {
		tail = &stderrTail{}
		serverStderr = tail
	}
	var restarted func() bool
	defer func() {
		if tail != nil && (showsServerStderr(err) || restarted != nil && restarted()) {
			tail.show(stderr)
		}
	}()
	if usesSignIn(*url, opts.Header) {
		// Signed in first, if the server asks, so that the clocks below
		// do not count the time a person takes: the sign-in has
		// --sign-in-timeout of its own.
		s, err := newSignIn("call", *url, &si, stderr)
		if err != nil {
			return err
		}
		defer s.Close()
		if _, err := s.first(ctx, opts.Header, opts.Era == mcp.Legacy); err != nil {
			if errors.Is(context.Cause(ctx), errInterrupted) {
				return &exitError{exitCancelled, "call: interrupted while signing in: the call was never sent"}
			}
			return signInError("call", err)
		}
		opts.Authorizer = s.oc
	}
	c, err := connect(ctx, *stdioCmd, *url, opts, serverStderr)
	if err != nil {
		if nf := notFoundAt("call", *url, err); nf != nil {
			return nf
		}
		return connectFailure(err)
	}
	defer c.Close()
	restarted = func() bool { return c.Stats().Restarts > 0 }
	var observe func(retry.Event)
	if cm != nil {
		cm.Watch(c)
		observe = cm.Observe
	}
	// One clock bounds listing the tools (for --list, or for the
	// arguments' types) and the call together: the call has what the
	// listing left of --max, so that a slow listing cannot double it.
	deadline := time.Now().Add(*maxD)
	maxErr := &client.DeadlineError{Clock: client.MaxClock, After: *maxD}
	maxCtx, stopMax := context.WithDeadlineCause(ctx, deadline, maxErr)
	defer stopMax()
	if *list {
		tools, err := c.ListTools(maxCtx)
		if err != nil {
			return callFailure(err)
		}
		if *asJSON {
			return printJSON(stdout, tools)
		}
		return printToolList(stdout, tools)
	}
	name := positional[0]
	tool, arguments, err := buildArguments(maxCtx, c, name, *argsJSON, positional[1:])
	if err != nil {
		return err
	}
	left := time.Until(deadline)
	if left <= 0 {
		// The listing took all of --max: the call was never sent.
		return callFailure(&client.DeadlineError{Clock: client.MaxClock, After: *maxD, Cancel: client.RequestNotSent})
	}
	switch {
	case *key != "":
		arguments[mcp.ArgIdempotencyKey] = *key
	case *autoKey:
		// Said before the call is sent: the key is the only way to make
		// the same operation again, or to find out what became of it,
		// whatever happens to the call or to this process.
		k := newKey()
		arguments[mcp.ArgIdempotencyKey] = k
		fmt.Fprintf(stderr, "mcprel call: --auto-key made the idempotency key %s: to make this call again as the same operation, give --idempotency-key %s; "+
			"to look it up, the server's lookup_operation, or mcprel ledger show --tool %s --key %s\n", k, k, name, k)
	}
	bar := newProgressBar(stderr, *idle)
	var res *mcp.CallToolResult
	if *asTask {
		// The task's wait has what is left; ctx, not maxCtx: its end
		// means the caller's cancel to CallToolTask, which then polls on
		// for the outcome.
		o := &client.CallOptions{Idle: *idle, Max: left, OnProgress: bar.update}
		res, err = c.CallToolTask(ctx, name, arguments, o, bar.task)
		err = saidAsMax(err, *maxD)
	} else {
		// maxCtx ends first (Max is the whole --max, more than is
		// left), so that its cause names --max.
		o := &client.CallOptions{Idle: *idle, Max: *maxD, OnProgress: bar.update}
		res, err = callWithRetries(maxCtx, c, tool, name, arguments, o, retryPolicy{class: *class, trustServer: *trust, attempts: *retries + 1, observe: observe}, stderr)
	}
	bar.done()
	if err != nil {
		return callFailure(interrupted(c, err))
	}
	if perr := printJSON(stdout, res); perr != nil {
		return perr
	}
	if res.IsError {
		return resultFailure(res)
	}
	return nil
}

// resultFailure is the exit status of a failed result, printed already:
// a tool's own failure is 10; a result that says the outcome is unknown
// (a gateway's or a ledger's outcome_unknown) is 17, and one that says
// the request never reached the server behind a gateway is 16, like the
// failures they report.
func resultFailure(res *mcp.CallToolResult) error {
	v := client.VerdictOf(res, nil)
	code := exitStatus(v)
	if code == exitToolError {
		return &exitError{exitToolError, ""}
	}
	return &exitError{code, "call: the server answered " + v.Err.Error()}
}

var errInterrupted = errors.New("interrupted")

// cancelWait bounds how long an interrupted call waits for its
// cancellation to be written before mcprel call exits: as long as a stdio
// server gets to exit when the connection closes.
const cancelWait = client.DefaultStopGrace

// interruptedError is a call ended by Ctrl-C, with what became of the
// request once mcprel call knew.
type interruptedError struct {
	ce   *client.CancelledError
	said string
}

func (e *interruptedError) Error() string { return "interrupted: " + e.said }
func (e *interruptedError) Unwrap() error { return e.ce }

// interrupted says what became of a call err ended by Ctrl-C. A
// cancellation the client queued without waiting (stdio, a 2025-era HTTP
// POST) is waited for, up to cancelWait, so that the server is told before
// mcprel call exits and the message can say whether it was. A second
// Ctrl-C still exits at once. Any other error is returned as it is.
func interrupted(c *client.Client, err error) error {
	var ce *client.CancelledError
	if !errors.As(err, &ce) || !errors.Is(ce.Cause, errInterrupted) {
		return err
	}
	const unknown = "; whether the server acted on the call before it was cancelled is unknown"
	e := &interruptedError{ce: ce}
	switch ce.Cancel {
	case client.RequestNotSent:
		e.said = "the request was withdrawn before any of it was sent: the server never saw it"
	case client.CancelSent:
		e.said = "the request's stream was closed, which is its cancellation (2026-07-28 HTTP)" + unknown
	case client.CancelQueued:
		ctx, cancel := context.WithTimeout(context.Background(), cancelWait)
		defer cancel()
		if werr := c.WaitCancellations(ctx); werr != nil {
			e.said = fmt.Sprintf("the cancellation could not be sent to the server within %v (%v): it may not know the call was cancelled%s", cancelWait, werr, unknown)
		} else {
			e.said = "the server was sent notifications/cancelled, and mcprel call waited until it was written" + unknown
		}
	case client.CancelNotSent:
		e.said = "the cancellation could not be sent to the server: it may not know the call was cancelled" + unknown
	default:
		return err
	}
	return e
}

// saidAsMax makes a task call's max deadline read as --max: the client
// timed what the listing left of it, a figure the user never gave. The
// error is the call's own, fresh for it.
func saidAsMax(err error, maxD time.Duration) error {
	var de *client.DeadlineError
	if errors.As(err, &de) && de.Clock == client.MaxClock {
		de.After = maxD
	}
	return err
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// connect dials the server the flags name.
func connect(ctx context.Context, command, url string, opts *client.Options, stderr io.Writer) (*client.Client, error) {
	if url != "" {
		return client.DialHTTP(ctx, url, opts)
	}
	words, err := splitCommand(command)
	if err != nil {
		return nil, usagef("call: --stdio: %v", err)
	}
	opts.Stderr = stderr
	// A server that dies is started again; whether the call it died in
	// is made again is the retry rules' decision.
	opts.Restart = true
	return client.DialStdio(ctx, words, opts)
}

// splitCommand splits a --stdio command line into its argv, without a
// shell (package argv).
func splitCommand(s string) ([]string, error) {
	words, err := argv.Split(s)
	if err == nil && len(words) == 0 {
		err = errors.New("--stdio names no command")
	}
	return words, err
}

// buildArguments turns --args or key=value pairs into the call's
// arguments, typing each value by the tool's input schema.
// It also returns the tool as the server lists it (nil if it does not),
// whose claims the retry rules may read.
func buildArguments(ctx context.Context, c *client.Client, name, argsJSON string, pairs []string) (*mcp.Tool, map[string]any, error) {
	var tool *mcp.Tool
	if tools, err := c.ListTools(ctx); err == nil {
		for i := range tools {
			if tools[i].Name == name {
				tool = &tools[i]
			}
		}
	}
	args := map[string]any{}
	if argsJSON != "" {
		if len(pairs) > 0 {
			return nil, nil, usagef("call: give the arguments as --args or as key=value pairs, not both")
		}
		dec := json.NewDecoder(strings.NewReader(argsJSON))
		dec.UseNumber()
		if err := dec.Decode(&args); err != nil {
			return nil, nil, usagef("call: --args must be a JSON object: %v", err)
		}
		return tool, args, nil
	}
	types := map[string]string{}
	if tool != nil {
		types = propertyTypes(tool.InputSchema)
	}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, nil, usagef("call: arguments are key=value pairs, not %q", p)
		}
		val, err := typed(v, types[k])
		if err != nil {
			return nil, nil, usagef("call: argument %s: %v", k, err)
		}
		args[k] = val
	}
	return tool, args, nil
}

// printToolList prints each tool on a short block, for a reader: its name
// and its arguments in the schema's order (optional ones marked "?", as
// the README writes them), then the first sentence of its description.
// The schemas themselves are --list --json's.
func printToolList(w io.Writer, tools []mcp.Tool) error {
	var b strings.Builder
	for _, t := range tools {
		fmt.Fprintf(&b, "%s {%s}\n", t.Name, strings.Join(argumentNames(t.InputSchema), ", "))
		if s := firstSentence(cmp.Or(t.Description, t.Title)); s != "" {
			fmt.Fprintf(&b, "    %s\n", s)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// argumentNames are the top-level properties of an input schema, in its
// order, an optional one (not in "required") followed by "?".
func argumentNames(schema json.RawMessage) []string {
	var s struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if json.Unmarshal(schema, &s) != nil || len(s.Properties) == 0 {
		return nil
	}
	var names []string
	jsonrpc.Members(s.Properties, func(k, _ []byte) bool {
		name := string(k)
		if !slices.Contains(s.Required, name) {
			name += "?"
		}
		names = append(names, name)
		return true
	})
	return names
}

// maxSentence bounds the description --list shows for a tool.
const maxSentence = 160

// firstSentence is the first sentence of a description, on one line, at
// most maxSentence characters.
func firstSentence(d string) string {
	d = strings.Join(strings.Fields(d), " ")
	if i := strings.Index(d, ". "); i >= 0 {
		d = d[:i+1]
	}
	if r := []rune(d); len(r) > maxSentence {
		d = string(r[:maxSentence-1]) + "…"
	}
	return d
}

// propertyTypes reads the type of each top-level property of a schema.
func propertyTypes(schema json.RawMessage) map[string]string {
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	json.Unmarshal(schema, &s)
	out := map[string]string{}
	for name, p := range s.Properties {
		switch t := p.Type.(type) {
		case string:
			out[name] = t
		case []any: // ["null","integer"]: the first that is not null
			for _, e := range t {
				if str, ok := e.(string); ok && str != "null" {
					out[name] = str
					break
				}
			}
		}
	}
	return out
}

// typed converts a command-line value to the schema's type; without one,
// a value that reads as JSON is JSON and anything else a string.
func typed(v, typ string) (any, error) {
	switch typ {
	case "string":
		return v, nil
	case "integer":
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return nil, fmt.Errorf("%q is not an integer", v)
		}
		return json.Number(v), nil
	case "number":
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return nil, fmt.Errorf("%q is not a number", v)
		}
		return json.Number(v), nil
	case "boolean":
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", v)
		}
		return b, nil
	}
	dec := json.NewDecoder(strings.NewReader(v))
	dec.UseNumber()
	var out any
	if dec.Decode(&out) == nil && !dec.More() {
		return out, nil
	}
	if typ == "object" || typ == "array" {
		return nil, fmt.Errorf("%q is not a JSON %s", v, typ)
	}
	return v, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// callFailure maps how a call failed to its exit status. The clocks and
// the interruption say most precisely how the call ended (their messages
// carry any reconcile advice); otherwise the verdict decides
// (exitStatus): a server's refusal says so in its own words, and an
// unknown outcome says what may be done next.
func callFailure(err error) error {
	var de *client.DeadlineError
	var ce *client.CancelledError
	switch {
	case errors.As(err, &de) && de.Clock == client.IdleClock:
		return &exitError{exitIdle, "call: " + err.Error()}
	case errors.As(err, &de):
		return &exitError{exitMax, "call: " + err.Error()}
	case errors.As(err, &ce):
		return &exitError{exitCancelled, "call: " + err.Error()}
	}
	if errors.As(err, new(usageError)) {
		return err // a mistake in the command line, found before anything was sent
	}
	code := exitStatus(client.VerdictOf(nil, err))
	if why, ok := refusal(err); ok && code == exitOverloaded {
		// Nothing is suggested otherwise: the status says to come back
		// later, and a task that was created already goes on.
		next := ""
		if errors.As(err, new(*reconcileError)) {
			// The planner kept an unsafe call from being made again on
			// an untrusted server's word that it did not run.
			next = "; the server says the call did not run, which mcprel call takes as proof only with --trust-server: " +
				"if the tool's effect matters, find out whether it happened before calling it again"
		}
		return &exitError{code, "call: " + why + next}
	}
	return &exitError{code, "call: " + err.Error()}
}

// exitStatus is the exit status of a call whose verdict is v: 17 for
// every outcome that is unknown, 16 for a request never sent (or that a
// gateway could not deliver), 15 for a server's refusal to come back
// later, 11 for any other refusal or protocol error, 10 for a tool's
// failure; 0 for a success.
func exitStatus(v retry.Verdict) int {
	switch {
	case v.Kind == retry.Succeeded:
		return 0
	case v.Outcome == retry.OutcomeRefused && refusedCredentials(v.Err):
		return exitSignIn
	case v.Outcome == retry.OutcomeUnknown:
		return exitReconcile
	case v.Outcome == retry.OutcomeNotSent, v.Kind == retry.Unreachable:
		return exitConnection
	}
	switch v.Kind {
	case retry.Overloaded, retry.RateLimited, retry.ShuttingDown, retry.InProgress:
		return exitOverloaded
	case retry.ToolFailed:
		return exitToolError
	}
	return exitProtocol
}

// refusedCredentials reports whether err is a server's refusal of the
// request's credentials: a sign-in that failed (the message says which
// step), or a 401 for a token given with --token.
func refusedCredentials(err error) bool {
	var se *client.StatusError
	return errors.As(err, new(*client.AuthorizationError)) || errors.As(err, &se) && se.Status == http.StatusUnauthorized
}

// connectFailure maps a failure to connect to its exit status: a mistake
// in --stdio is the command line's, a server that answered it is shutting
// down or overloaded says so (15), one that answered with a redirect
// refused it (11), anything else is no connection (16).
func connectFailure(err error) error {
	var ue usageError
	var rd *client.RedirectError
	if errors.As(err, &ue) {
		return err
	}
	if errors.As(err, &rd) {
		return &exitError{exitProtocol, "call: connecting: " + err.Error()}
	}
	if refusedCredentials(err) {
		return signInError("call: connecting", err)
	}
	if why, ok := refusal(err); ok {
		return &exitError{exitOverloaded, "call: connecting: " + why + "; try again later (or another replica)"}
	}
	return &exitError{exitConnection, "call: connecting: " + err.Error()}
}

// refusal describes, with the server's own words, an answer that refused
// the request before running it — shutting down, overloaded, rate
// limited — and reports false for any other failure.
func refusal(err error) (string, bool) {
	var re *jsonrpc.Error
	var se *client.StatusError
	switch {
	case errors.As(err, &re) && re.Code == mcp.CodeUnavailable:
		return fmt.Sprintf("the server is shutting down and refused the request (it answered %d %q)", re.Code, re.Message), true
	case errors.As(err, &re) && re.Code == mcp.CodeOverloaded:
		return fmt.Sprintf("the server is overloaded and refused the request (it answered %d %q)", re.Code, re.Message), true
	case errors.As(err, &re) && re.Code == mcp.CodeRateLimited:
		return fmt.Sprintf("a rate limit refused the request (the server answered %d %q)", re.Code, re.Message), true
	case errors.As(err, &se) && (se.Status == http.StatusTooManyRequests || se.Status == http.StatusServiceUnavailable):
		why := fmt.Sprintf("the server answered HTTP %d (%s)", se.Status, http.StatusText(se.Status))
		if se.RetryAfter != "" {
			why += ", retry after " + se.RetryAfter
		}
		if se.Body != "" {
			why += ": " + se.Body
		}
		return why, true
	}
	return "", false
}

// showsServerStderr says whether a call that ended with err shows the end
// of a stdio server's stderr: when it failed for a reason the server's log
// may explain, not for a mistake in the command line or a tool's own
// failure (its result is printed).
func showsServerStderr(err error) bool {
	var ue usageError
	var ee *exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp), errors.As(err, &ue):
		return false
	case errors.As(err, &ee):
		return ee.code != exitToolError
	}
	return true
}

// callUsage is "mcprel call -h": the forms, the flags, and what each exit
// status means.
func callUsage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), `usage: mcprel call --stdio "CMD" | --url URL [flags] TOOL [key=value ...] [-- key=value ...]
       mcprel call --stdio "CMD" | --url URL --list

Calls one tool on any MCP server, with an idle and a maximum deadline,
cancellation the transport's way, and retries only where the retry class
allows. Values are typed by the tool's input schema (or give one JSON
object with --args). Flags may come before or after the tool and its
arguments; everything after "--" is a tool argument.

Exit status:
  0   the tool succeeded
  1   another failure (the --metrics-file could not be written, ...)
  2   a mistake in the command line (a flag, a value, the URL: one the
      server answers with 404 serves no MCP endpoint)
  10  the tool reported a failure (isError); the result is printed
  11  the server refused the request (a JSON-RPC error, or an HTTP redirect,
      which mcprel never follows: it names where the redirect pointed)
  12  the idle deadline fired: no increasing progress for --idle
  13  the maximum deadline fired: the call ran for --max
  14  interrupted (Ctrl-C); the message says what became of the request
  15  the server refused the request for now (overloaded, rate limited,
      shutting down, or the key's operation still running): nothing ran
  16  the request was never sent: the server could not be reached (or a
      gateway could not reach the server behind it)
  17  the outcome is unknown: the call may or may not have taken effect
      (the connection was lost, an HTTP 5xx, a gateway's outcome_unknown);
      the message says whether calling again is safe or to reconcile first
  18  the server wants credentials it was not given: the sign-in failed
      (the message names the step and why) or timed out, or it refused
      the --token given; nothing ran

Over HTTP, a server that asks for OAuth credentials is signed in to:
the authorization URL is printed on stderr and opened in a browser
($BROWSER, else the system's; --no-browser only prints it), the redirect
comes back to 127.0.0.1, and the tokens are kept (--oauth-dir) for the
next run, which reuses and refreshes them. The sign-in happens before
--max starts and has --sign-in-timeout of its own. "mcprel login URL"
signs in ahead of time and "mcprel logout URL" forgets the tokens.

Flags:
`)
	fs.PrintDefaults()
}

// progressBar shows a call's progress on stderr: a bar redrawn in place on
// a terminal, a line per report otherwise.
type progressBar struct {
	w     io.Writer
	tty   bool
	start time.Time
	idle  time.Duration
	drawn bool
}

func newProgressBar(w io.Writer, idle time.Duration) *progressBar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progressBar{w: w, tty: tty, start: time.Now(), idle: idle}
}

func (b *progressBar) update(p client.Progress) {
	elapsed := time.Since(b.start).Round(100 * time.Millisecond)
	of := ""
	bar := ""
	if p.Total != nil && *p.Total > 0 {
		of = fmt.Sprintf("/%g", *p.Total)
		frac := min(1, p.Progress / *p.Total)
		n := int(frac * 20)
		bar = "[" + strings.Repeat("#", n) + strings.Repeat(".", 20-n) + "] "
	}
	line := fmt.Sprintf("%s%g%s %s  elapsed %v, idle deadline in %v", bar, p.Progress, of, p.Message, elapsed, b.idle)
	if b.tty {
		fmt.Fprintf(b.w, "\r\033[K%s", line)
		b.drawn = true
		return
	}
	fmt.Fprintln(b.w, "progress:", line)
}

// task shows a task's status as it is polled.
func (b *progressBar) task(status, message string) {
	line := "task " + status
	if message != "" {
		line += ": " + message
	}
	if b.tty {
		fmt.Fprintf(b.w, "\r\033[K%s  elapsed %v", line, time.Since(b.start).Round(100*time.Millisecond))
		b.drawn = true
		return
	}
	fmt.Fprintln(b.w, line)
}

func (b *progressBar) done() {
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}

package client_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// verdictRow is one row of the verdict table: what happened to a request,
// given either as the HTTP server's behaviour when the call arrives
// (script: the error is the one a real call gets) or as what the client
// returns (res, err), and the verdict it must get.
type verdictRow struct {
	what      string
	script    http.HandlerFunc
	res       *mcp.CallToolResult
	err       error
	outcome   retry.Outcome
	kind      retry.Kind
	retryable bool
}

func failed(code string, retryable bool) *mcp.CallToolResult {
	return (&mcp.ToolError{Code: code, Message: code, Retryable: retryable, RetryAfter: time.Second}).Result()
}

func rpcError(code int64) error { return jsonrpc.NewError(code, "refused") }

// status answers the call with an HTTP status and a body that is no
// JSON-RPC message.
func status(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, http.StatusText(code), code)
	}
}

// hangUp closes the connection without an answer; after the headers
// when headers is set, after half a JSON body when body is set.
func hangUp(headers, body bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if headers {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "200")
			w.WriteHeader(http.StatusOK)
			if body {
				io.WriteString(w, `{"jsonrpc":"2.0","id":`)
			}
			w.(http.Flusher).Flush()
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.(*net.TCPConn).SetLinger(0) // a reset, not a clean close
			conn.Close()
		}
	}
}

func answer(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		m := readPosted(r)
		fmt.Fprintf(w, body, m.ID)
	}
}

func verdictRows() []verdictRow {
	return []verdictRow{
		{what: "a result", res: &mcp.CallToolResult{}, outcome: retry.OutcomeAnswered, kind: retry.Succeeded},
		{what: "no connection could be opened (refused, DNS, TLS handshake)", err: &client.ConnectError{Err: errors.New("connection refused")}, outcome: retry.OutcomeNotSent, kind: retry.NotSent},
		{what: "HTTP 400, 401, 403, 404, 405, 406, 413, 415 (a refusal)", script: status(http.StatusUnauthorized), outcome: retry.OutcomeRefused, kind: retry.Rejected},
		{what: "HTTP 408 or 409", script: status(http.StatusRequestTimeout), outcome: retry.OutcomeUnknown, kind: retry.Lost},
		{what: "HTTP 429", script: status(http.StatusTooManyRequests), outcome: retry.OutcomeRefused, kind: retry.RateLimited},
		{what: "HTTP 500, 502, 504 and other 5xx", script: status(http.StatusBadGateway), outcome: retry.OutcomeUnknown, kind: retry.Lost},
		{what: "HTTP 503 (a proxy may have passed the request on)", script: status(http.StatusServiceUnavailable), outcome: retry.OutcomeUnknown, kind: retry.Unavailable},
		{what: "HTTP 2xx whose body is no JSON-RPC response", script: func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "<html>ok</html>") }, outcome: retry.OutcomeUnknown, kind: retry.Lost},
		{what: "an HTTP redirect (never followed)", script: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}, outcome: retry.OutcomeRefused, kind: retry.Rejected},
		{what: "the connection reset before the answer's headers", script: hangUp(false, false), outcome: retry.OutcomeUnknown, kind: retry.Lost},
		{what: "the connection reset after the answer's headers", script: hangUp(true, false), outcome: retry.OutcomeUnknown, kind: retry.Lost},
		{what: "EOF in the middle of the answer's body", script: hangUp(true, true), outcome: retry.OutcomeUnknown, kind: retry.Lost},
		{what: "a malformed answer", script: answer(`{"jsonrpc":"2.0","id":%s,"result":[`), outcome: retry.OutcomeUnknown, kind: retry.Lost},
		{what: "an answer larger than the client takes in", err: &client.ResponseTooLargeError{Limit: 1 << 20}, outcome: retry.OutcomeUnknown, kind: retry.Lost},
		{what: "the connection (or stdio server) ended with the request in flight", err: client.ErrConnectionLost, outcome: retry.OutcomeUnknown, kind: retry.Lost},
		{what: "JSON-RPC -32601 method not found, -32600, -32700, -32020, -32021, -32022", script: answer(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`), outcome: retry.OutcomeRefused, kind: retry.Rejected},
		{what: "JSON-RPC -32602 invalid params, -32603 internal error, any other code", err: rpcError(jsonrpc.CodeInvalidParams), outcome: retry.OutcomeAnswered, kind: retry.Rejected},
		{what: "JSON-RPC error from a gateway whose body says `outcome_unknown` (a read other than a call)", err: jsonrpc.NewError(jsonrpc.CodeInternalError, "lost").WithData(mcp.Failure{Code: mcp.FailureOutcomeUnknown, Retryable: true}), outcome: retry.OutcomeUnknown, kind: retry.Undetermined, retryable: true},
		{what: "JSON-RPC -31001 overloaded", err: rpcError(mcp.CodeOverloaded), outcome: retry.OutcomeRefused, kind: retry.Overloaded},
		{what: "JSON-RPC -31002 shutting down", err: rpcError(mcp.CodeUnavailable), outcome: retry.OutcomeRefused, kind: retry.ShuttingDown},
		{what: "JSON-RPC -31003 the server's deadline fired", err: rpcError(mcp.CodeTimeout), outcome: retry.OutcomeUnknown, kind: retry.ServerTimeout},
		{what: "JSON-RPC -31004 rate limited", err: rpcError(mcp.CodeRateLimited), outcome: retry.OutcomeRefused, kind: retry.RateLimited},
		{what: "isError result, not retryable (the tool's answer)", res: failed("insufficient_stock", false), outcome: retry.OutcomeAnswered, kind: retry.ToolFailed},
		{what: "isError result, retryable", res: failed(mcp.FailureToolError, true), outcome: retry.OutcomeAnswered, kind: retry.ToolFailed, retryable: true},
		{what: "isError `invalid_arguments`, `idempotency_key_required`, `idempotency_conflict`", res: failed(mcp.FailureKeyConflict, false), outcome: retry.OutcomeRefused, kind: retry.ToolFailed},
		{what: "isError `ledger_unavailable`, `storage_unavailable` (rolled back)", res: failed(mcp.FailureLedger, true), outcome: retry.OutcomeRefused, kind: retry.ToolFailed, retryable: true},
		{what: "isError `timeout` (the server's deadline fired)", res: failed(mcp.FailureTimeout, false), outcome: retry.OutcomeUnknown, kind: retry.ServerTimeout},
		{what: "isError `overloaded`, `rate_limited`, `shutting_down`", res: failed(mcp.FailureOverloaded, true), outcome: retry.OutcomeRefused, kind: retry.Overloaded, retryable: true},
		{what: "isError `in_progress` (the key's operation still runs)", res: failed(mcp.FailureInProgress, true), outcome: retry.OutcomeRefused, kind: retry.InProgress, retryable: true},
		{what: "isError `upstream_unavailable` (a gateway's upstream not reached)", res: failed(mcp.FailureUpstreamUnavailable, true), outcome: retry.OutcomeRefused, kind: retry.Unreachable, retryable: true},
		{what: "isError `upstream_unauthorized` (a gateway's upstream refused its credentials)", res: failed(mcp.FailureUpstreamUnauthorized, false), outcome: retry.OutcomeRefused, kind: retry.Rejected},
		{what: "the server refused the credentials and signing in failed (`*client.AuthorizationError`)", err: &client.AuthorizationError{Status: 401}, outcome: retry.OutcomeRefused, kind: retry.Rejected},
		{what: "isError `outcome_unknown`, retryable (resending is safe)", res: failed(mcp.FailureOutcomeUnknown, true), outcome: retry.OutcomeUnknown, kind: retry.Undetermined, retryable: true},
		{what: "isError `outcome_unknown`, not retryable", res: failed(mcp.FailureOutcomeUnknown, false), outcome: retry.OutcomeUnknown, kind: retry.Undetermined},
		{what: "an input round the client did not answer", err: &client.InputError{Err: client.ErrNoRequestHandler}, outcome: retry.OutcomeRefused, kind: retry.Rejected},
		{what: "the idle deadline fired (request sent)", err: &client.DeadlineError{Clock: client.IdleClock, Cancel: client.CancelSent}, outcome: retry.OutcomeUnknown, kind: retry.IdleTimeout},
		{what: "the maximum deadline fired (request sent)", err: &client.DeadlineError{Clock: client.MaxClock, Cancel: client.CancelSent}, outcome: retry.OutcomeUnknown, kind: retry.MaxTimeout},
		{what: "a deadline fired before the request was written", err: &client.DeadlineError{Clock: client.MaxClock, Cancel: client.RequestNotSent}, outcome: retry.OutcomeNotSent, kind: retry.MaxTimeout},
		{what: "the caller cancelled (request sent)", err: &client.CancelledError{Cancel: client.CancelSent, Cause: context.Canceled}, outcome: retry.OutcomeUnknown, kind: retry.Cancelled},
		{what: "the caller cancelled before the request was written", err: &client.CancelledError{Cancel: client.RequestNotSent, Cause: context.Canceled}, outcome: retry.OutcomeNotSent, kind: retry.Cancelled},
		{what: "any other error", err: io.ErrUnexpectedEOF, outcome: retry.OutcomeUnknown, kind: retry.Lost},
	}
}

// TestVerdictTable: every way a request can end has one verdict, the
// table's, and the rows given as a server's behaviour are what a real
// call over Streamable HTTP gets.
func TestVerdictTable(t *testing.T) {
	var script atomic.Pointer[http.HandlerFunc]
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := readPosted(r)
		switch m.Method {
		case mcp.MethodInitialize:
			w.Header().Set("Mcp-Session-Id", "s")
			answerInitialize(w, m.ID, "scripted")
		case "tools/call":
			r.Body = io.NopCloser(bytes.NewReader(fmt.Appendf(nil, `{"id":%s}`, m.ID)))
			(*script.Load())(w, r)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer hs.Close()
	c, err := client.DialHTTP(context.Background(), hs.URL+"/mcp", &client.Options{Era: mcp.Legacy})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, row := range verdictRows() {
		t.Run(row.what, func(t *testing.T) {
			res, err := row.res, row.err
			if row.script != nil {
				script.Store(&row.script)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				res, err = c.CallTool(ctx, "op", nil, &client.CallOptions{Max: 10 * time.Second})
				if err == nil {
					t.Fatalf("the call succeeded: %+v", res)
				}
			}
			v := client.VerdictOf(res, err)
			if v.Outcome != row.outcome || v.Kind != row.kind || v.Retryable != row.retryable {
				t.Errorf("VerdictOf(%v, %v) = %v %v retryable=%v; want %v %v retryable=%v", res, err, v.Outcome, v.Kind, v.Retryable, row.outcome, row.kind, row.retryable)
			}
			if row.kind != retry.Succeeded && v.Err == nil {
				t.Error("a failure's verdict carries no error")
			}
		})
	}
}

// TestVerdictOfAFailedTLSHandshake: a server whose certificate the client
// does not trust was never sent the request.
func TestVerdictOfAFailedTLSHandshake(t *testing.T) {
	hs := httptest.NewTLSServer(http.NotFoundHandler())
	defer hs.Close()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{}}}
	_, err := client.DialHTTP(context.Background(), hs.URL+"/mcp", &client.Options{Era: mcp.Legacy, HTTPClient: hc})
	if v := client.VerdictOf(nil, err); err == nil || v.Outcome != retry.OutcomeNotSent {
		t.Fatalf("dial = %v, verdict %v %v; want not sent", err, v.Outcome, v.Kind)
	}
}

// planned is what a planner does after the first attempt fails with v,
// for a call of the given class.
func planned(v retry.Verdict, class mcp.RetryClass, trust bool) string {
	p := retry.NewPlanner(retry.Options{Table: retry.Table{Default: retry.Rule{Class: class}, TrustServer: trust}, MaxAttempts: 2})
	d := p.Start(retry.Call{Tool: "op", HasIdempotencyKey: class == mcp.RetryConditional, Deadline: time.Now().Add(time.Hour)}).Next(v, time.Now())
	var rec *retry.ReconcileError
	switch {
	case d.Retry && d.SameKey:
		return "retried, same key"
	case d.Retry:
		return "retried"
	case errors.As(d.Err, &rec):
		return "reconcile"
	}
	return "ends"
}

// verdictTable is the table as docs/errors.md shows it, each row's
// planning taken from the planner itself.
func verdictTable() string {
	var b strings.Builder
	b.WriteString("| What happened to the request | Outcome | Kind | safe | conditional (keyed) | unsafe | unsafe, trusted server |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, row := range verdictRows() {
		v := retry.Verdict{Outcome: row.outcome, Kind: row.kind, Retryable: row.retryable, Err: errors.New(row.what)}
		plans := "—"
		if row.kind != retry.Succeeded && row.kind != retry.Cancelled {
			plans = fmt.Sprintf("%s | %s | %s | %s", planned(v, mcp.RetrySafe, false), planned(v, mcp.RetryConditional, false),
				planned(v, mcp.RetryUnsafe, false), planned(v, mcp.RetryUnsafe, true))
		} else {
			plans = "— | — | — | —"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", row.what, row.outcome, row.kind, plans)
	}
	return b.String()
}

const (
	tableBegin = "<!-- verdict table: generated by client's TestVerdictTableIsDocumented; MCPREL_WRITE_VERDICT_TABLE=1 rewrites it -->\n"
	tableEnd   = "<!-- end of verdict table -->\n"
)

// TestVerdictTableIsDocumented: docs/errors.md shows the table the code
// follows.
func TestVerdictTableIsDocumented(t *testing.T) {
	const path = "../docs/errors.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, tableBegin), strings.Index(s, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no verdict table between %q and %q", path, tableBegin, tableEnd)
	}
	want := verdictTable()
	if got := s[i+len(tableBegin) : j]; got != want {
		if os.Getenv("MCPREL_WRITE_VERDICT_TABLE") == "1" {
			if err := os.WriteFile(path, []byte(s[:i+len(tableBegin)]+want+s[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s's verdict table differs from the code's; run with MCPREL_WRITE_VERDICT_TABLE=1 to rewrite it. The code's:\n%s", path, want)
	}
}

package retry_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

func rpcError(code int64, data string) *jsonrpc.Error {
	e := &jsonrpc.Error{Code: code, Message: "m"}
	if data != "" {
		e.Data = json.RawMessage(data)
	}
	return e
}

func TestClassifyErrors(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		kind       retry.Kind
		retryAfter time.Duration
	}{
		{"overloaded with retryAfterMs", rpcError(mcp.CodeOverloaded, `{"code":"overloaded","message":"m","retryable":true,"retryAfterMs":1500}`), retry.Overloaded, 1500 * time.Millisecond},
		{"overloaded without data", rpcError(mcp.CodeOverloaded, ""), retry.Overloaded, 0},
		{"overloaded with junk data", rpcError(mcp.CodeOverloaded, `"busy"`), retry.Overloaded, 0},
		{"overloaded with negative retryAfterMs", rpcError(mcp.CodeOverloaded, `{"code":"overloaded","message":"m","retryable":true,"retryAfterMs":-5}`), retry.Overloaded, 0},
		{"rate limited", rpcError(mcp.CodeRateLimited, `{"code":"rate_limited","message":"m","retryable":true,"retryAfterMs":20}`), retry.RateLimited, 20 * time.Millisecond},
		{"shutting down", rpcError(mcp.CodeUnavailable, `{"code":"shutting_down","message":"m","retryable":true}`), retry.ShuttingDown, 0},
		{"server timeout", rpcError(mcp.CodeTimeout, `{"code":"timeout","message":"m","retryable":false}`), retry.ServerTimeout, 0},
		{"wrapped overloaded", fmt.Errorf("client: %w", rpcError(mcp.CodeOverloaded, "")), retry.Overloaded, 0},
		{"invalid params", rpcError(jsonrpc.CodeInvalidParams, ""), retry.Rejected, 0},
		{"method not found", rpcError(jsonrpc.CodeMethodNotFound, ""), retry.Rejected, 0},
		{"invalid request", rpcError(jsonrpc.CodeInvalidRequest, ""), retry.Rejected, 0},
		{"parse error", rpcError(jsonrpc.CodeParseError, ""), retry.Rejected, 0},
		{"internal error", rpcError(jsonrpc.CodeInternalError, ""), retry.Rejected, 0},
		{"header mismatch", rpcError(mcp.CodeHeaderMismatch, ""), retry.Rejected, 0},
		{"missing capability", rpcError(mcp.CodeMissingClientCapability, ""), retry.Rejected, 0},
		{"unsupported version", rpcError(mcp.CodeUnsupportedVersion, ""), retry.Rejected, 0},
		{"application code with retryAfterMs", rpcError(-1, `{"code":"x","message":"m","retryable":true,"retryAfterMs":5}`), retry.Rejected, 0},
		{"transport error", io.ErrUnexpectedEOF, retry.Lost, 0},
		{"nil", nil, retry.Lost, 0},
		{"tool error", &mcp.ToolError{Code: mcp.FailureLedger, Retryable: true, RetryAfter: time.Second}, retry.ToolFailed, time.Second},
		{"tool timeout", &mcp.ToolError{Code: mcp.FailureTimeout, Retryable: true}, retry.ServerTimeout, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := retry.Classify(tt.err)
			if f.Kind != tt.kind || f.RetryAfter != tt.retryAfter {
				t.Errorf("Classify = %v after %v; want %v after %v", f.Kind, f.RetryAfter, tt.kind, tt.retryAfter)
			}
			if f.Err != tt.err {
				t.Errorf("Classify kept %v, want the error itself", f.Err)
			}
		})
	}
}

func TestFromResult(t *testing.T) {
	// decoded is a result as a client decodes it from the wire: the
	// failure body under _meta is a map, not the RawMessage a server built.
	decoded := func(r *mcp.CallToolResult) *mcp.CallToolResult {
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Meta    mcp.Meta `json:"_meta"`
			IsError bool     `json:"isError"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		return &mcp.CallToolResult{ResultBase: mcp.ResultBase{Meta: out.Meta}, IsError: out.IsError, Content: r.Content}
	}
	inProgress := (&mcp.ToolError{Code: mcp.FailureInProgress, Message: "busy", Retryable: true, RetryAfter: 250 * time.Millisecond}).Result()
	stock := (&mcp.ToolError{Code: "insufficient_stock", Message: "only 5"}).Result()
	timeout := (&mcp.ToolError{Code: mcp.FailureTimeout, Message: "idle", Retryable: false}).Result()
	tests := []struct {
		name      string
		result    *mcp.CallToolResult
		kind      retry.Kind
		retryable bool
		after     time.Duration
		code      string
	}{
		{"retryable, as built", inProgress, retry.InProgress, true, 250 * time.Millisecond, mcp.FailureInProgress},
		{"retryable, as decoded", decoded(inProgress), retry.InProgress, true, 250 * time.Millisecond, mcp.FailureInProgress},
		{"business failure", decoded(stock), retry.ToolFailed, false, 0, "insufficient_stock"},
		{"server timeout", decoded(timeout), retry.ServerTimeout, false, 0, mcp.FailureTimeout},
		{"no body (another server)", &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "boom"}}}, retry.ToolFailed, false, 0, mcp.FailureToolError},
		{"body without code", &mcp.CallToolResult{IsError: true, ResultBase: mcp.ResultBase{Meta: mcp.Meta{mcp.MetaFailure: map[string]any{"retryable": true}}}}, retry.ToolFailed, false, 0, mcp.FailureToolError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := retry.FromResult(tt.result)
			if !ok {
				t.Fatal("FromResult reported no failure")
			}
			if f.Kind != tt.kind || f.Retryable != tt.retryable || f.RetryAfter != tt.after {
				t.Errorf("got %v retryable=%v after %v; want %v retryable=%v after %v", f.Kind, f.Retryable, f.RetryAfter, tt.kind, tt.retryable, tt.after)
			}
			te, ok := errors.AsType[*mcp.ToolError](f.Err)
			if !ok || te.Code != tt.code {
				t.Errorf("Err = %v, want an *mcp.ToolError with code %q", f.Err, tt.code)
			}
		})
	}
	if _, ok := retry.FromResult(&mcp.CallToolResult{}); ok {
		t.Error("a successful result is not a failure")
	}
	if _, ok := retry.FromResult(nil); ok {
		t.Error("a nil result is not a failure")
	}
}

func TestKindNamesAreStable(t *testing.T) {
	want := map[retry.Kind]string{
		retry.Lost: "lost", retry.NotSent: "not_sent", retry.IdleTimeout: "idle_timeout",
		retry.MaxTimeout: "max_timeout", retry.ServerTimeout: "server_timeout",
		retry.Overloaded: "overloaded", retry.RateLimited: "rate_limited",
		retry.ShuttingDown: "shutting_down", retry.ToolFailed: "tool_failed",
		retry.Rejected: "rejected", retry.Kind(200): "unknown",
	}
	for k, s := range want {
		if k.String() != s {
			t.Errorf("Kind(%d).String() = %q, want %q", k, k.String(), s)
		}
	}
}

// A gateway's upstream_unauthorized, as a tool result or as the
// JSON-RPC error of a call it could not route (its upstream refused the
// gateway's credentials from the start), is a refusal: nothing ran.
func TestUpstreamUnauthorizedIsARefusal(t *testing.T) {
	for name, err := range map[string]error{
		"tool error":     &mcp.ToolError{Code: mcp.FailureUpstreamUnauthorized},
		"JSON-RPC error": rpcError(jsonrpc.CodeInternalError, `{"code":"upstream_unauthorized","message":"m","retryable":false}`),
	} {
		if f := retry.Classify(err); f.Kind != retry.Rejected || f.Outcome != retry.OutcomeRefused || f.Retryable {
			t.Errorf("%s: %v %v retryable=%v; want rejected, refused, not retryable", name, f.Kind, f.Outcome, f.Retryable)
		}
	}
}

package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
)

// taskFront is a gateway in front of m whose policy makes "send" a keyed
// task (required) and "outbox" an optional one, on one SQLite store for
// the ledger and the tasks.
func taskFront(t *testing.T, m *mailer) (*front, *taskserver.Server) {
	t.Helper()
	l := ledgertest.Open(t, storetest.SQLite(t), nil, nil, "")
	st, err := tasks.Open(context.Background(), l.DB(), nil)
	must(t, err)
	srv := mcptest.NewServer(t, &server.Options{ProgressInterval: time.Nanosecond})
	ts, err := taskserver.New(srv, st, nil)
	must(t, err)
	t.Cleanup(func() { ts.Shutdown(context.Background()) })
	f := newFrontOn(t, srv, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "mail", URL: m.url}},
		Ledger:    l, Tasks: ts,
		Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{
			"send":   {Keyed: &idempotency.Policy{Key: idempotency.KeyOptional, External: true, AtMostOnce: true, KeyArgument: "requestId"}, Task: &taskserver.Policy{Required: true}},
			"outbox": {Server: server.Policy{Retry: mcp.RetrySafe}, Task: &taskserver.Policy{}},
		}},
	}, nil)
	return f, ts
}

func taskClient(t *testing.T, f *front) *client.Client {
	return f.dial(t, mcp.Modern, &client.Options{Capabilities: mcp.ClientCapabilities{Extensions: map[string]json.RawMessage{mcp.ExtensionTasks: json.RawMessage(`{}`)}}})
}

// A slow upstream tool made a task: the client gets a task at once and
// follows it to the upstream's answer; a retry of the keyed creation gets
// the same task back, and the upstream is sent the call once.
func TestUpstreamToolAsATask(t *testing.T) {
	m := newMailer(t)
	f, _ := taskFront(t, m)
	c := taskClient(t, f)
	var statuses []string
	args := map[string]any{"to": "ops", "text": "hello", "requestId": "t-1"}
	res, err := c.CallToolTask(context.Background(), "send", args, nil, func(status, _ string) { statuses = append(statuses, status) })
	must(t, err)
	if res.IsError || text(res) != "sent to ops" || m.sent.Load() != 1 || len(statuses) == 0 {
		t.Fatalf("the task's result = %+v (statuses %v), %d sent", res, statuses, m.sent.Load())
	}
	again, err := c.CallToolTask(context.Background(), "send", args, nil, nil)
	must(t, err)
	if again.IsError || text(again) != "sent to ops" || m.sent.Load() != 1 {
		t.Fatalf("the retried creation = %+v, %d sent; want the same task's result, sent once", again, m.sent.Load())
	}
	// A client that cannot take a task is refused a tool that needs one.
	plain := f.dial(t, mcp.Modern, nil)
	if _, err := plain.CallTool(context.Background(), "send", map[string]any{"to": "ops", "text": "hello", "requestId": "t-2"}, nil); err == nil || m.sent.Load() != 1 {
		t.Fatalf("a client without tasks called a task-only tool: %v, %d sent", err, m.sent.Load())
	}
	// An optional task runs inline for such a client.
	if res, err := plain.CallTool(context.Background(), "outbox", nil, nil); err != nil || res.IsError {
		t.Fatalf("an optional task inline: %+v, %v", res, err)
	}
}

// tasks/cancel reaches the upstream: the forward checks in with its task,
// sees the intent, and cancels the upstream call its own way. The call
// had reached an upstream that does not honour the key, which may have
// acted before the cancellation reached it: the task ends with its
// outcome unknown, never "cancelled", and a retry of the keyed creation
// gets that answer without a second send.
func TestCancelledTaskOfAMutationEndsOutcomeUnknown(t *testing.T) {
	m := newMailer(t)
	m.hold = make(chan struct{}) // never released: only a cancellation ends it
	m.entered = make(chan string, 4)
	f, _ := taskFront(t, m)
	c := taskClient(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	type end struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan end, 1)
	args := map[string]any{"to": "ops", "text": "hello", "requestId": "t-3"}
	go func() {
		res, err := c.CallToolTask(ctx, "send", args, nil, nil)
		done <- end{res, err}
	}()
	recv(t, m.entered, "the upstream call") // the request reached the upstream
	cancel()
	got := recv(t, done, "the cancelled task's end")
	if got.err != nil {
		t.Fatalf("the task ended with %v, want a result saying its outcome is unknown", got.err)
	}
	if fl := failureOf(t, got.res); fl.Code != mcp.FailureOutcomeUnknown || fl.Retryable || !strings.Contains(fl.Message, "tasks/cancel") {
		t.Fatalf("the cancelled task's result = %+v, want outcome_unknown, not retryable", fl)
	}
	if rec := f.awaitForward(t, "send"); rec.Outcome != gateway.OutcomeCancelled || !rec.CancelPropagated {
		t.Fatalf("the forward was recorded %+v, want cancelled upstream", rec)
	}
	again, err := c.CallToolTask(context.Background(), "send", args, nil, nil)
	if err != nil || failureOf(t, again).Code != mcp.FailureOutcomeUnknown {
		t.Fatalf("the retried creation = %+v, %v; want the same task's unknown outcome", again, err)
	}
	select {
	case tool := <-m.entered:
		t.Fatalf("the retry reached the upstream (%s)", tool)
	default:
	}
}

// A read's task cancelled mid-call ends cancelled: nothing it did can be
// hidden by that.
func TestCancelledTaskOfAReadEndsCancelled(t *testing.T) {
	m := newMailer(t)
	m.holdReads = make(chan struct{})
	m.entered = make(chan string, 4)
	f, _ := taskFront(t, m)
	c := taskClient(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.CallToolTask(ctx, "outbox", nil, nil, nil)
		done <- err
	}()
	recv(t, m.entered, "the upstream call")
	cancel()
	var ce *client.CancelledError
	if err := recv(t, done, "the cancelled task's end"); !errors.As(err, &ce) {
		t.Fatalf("the read's task ended with %v, want it cancelled", err)
	}
	if rec := f.awaitForward(t, "outbox"); rec.Outcome != gateway.OutcomeCancelled || !rec.CancelPropagated {
		t.Fatalf("the forward was recorded %+v, want cancelled upstream", rec)
	}
}

package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
)

// taskServer is an mcprel server whose tool "ask" runs as a durable task
// (SQLite in the test's directory) and, in the task, asks for input with
// taskserver.Ask.
func askingTaskServer(t *testing.T, handler server.ToolHandler) *server.Server {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "tasks.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// Polled every 10 ms: the test waits on the task, not on a clock.
	st, err := tasks.Open(ctx, db, &tasks.Options{PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := mcptest.NewServer(t, nil)
	ts, err := taskserver.New(srv, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Shutdown(ctx) })
	if err := srv.AddTool(server.Tool{Name: "ask", Policy: server.Policy{Timeout: server.TimeoutLong}}, handler,
		taskserver.AsTask(ts, taskserver.Policy{Required: true})); err != nil {
		t.Fatal(err)
	}
	return srv
}

var tasksExtension = mcp.ClientCapabilities{Extensions: map[string]json.RawMessage{mcp.ExtensionTasks: json.RawMessage(`{}`)}}

// A task that asks for input while it runs (input_required, then
// working again) is answered through the same OnRequest, with
// tasks/update, and completes.
func TestTaskInputRequired(t *testing.T) {
	for _, over := range []string{"stdio", "http"} {
		t.Run(over, func(t *testing.T) {
			srv := askingTaskServer(t, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				first, err := taskserver.Ask(ctx, req, map[string]mcp.InputRequest{"name": elicitName("name?")}, "who?")
				if err != nil {
					return nil, err
				}
				second, err := taskserver.Ask(ctx, req, map[string]mcp.InputRequest{"color": elicitName("color?")}, "which color?")
				if err != nil {
					return nil, err
				}
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(accepted(t, first["name"]) + " likes " + accepted(t, second["color"]))}}, nil
			})
			var asked []string
			c := dialModern(t, srv, over, client.Options{Capabilities: tasksExtension,
				OnRequest: answerWith(map[string]string{"name?": "Ada", "color?": "green"}, &asked)})
			var statuses []string
			res, err := c.CallToolTask(context.Background(), "ask", nil, nil, func(status, _ string) { statuses = append(statuses, status) })
			if err != nil || firstText(res) != "Ada likes green" {
				t.Fatalf("ask = %+v, %v (statuses %v)", res, err, statuses)
			}
			if len(asked) != 2 {
				t.Fatalf("OnRequest was asked %v; want each question once", asked)
			}
		})
	}
}

// Input a task asks for that the client cannot give cancels the task and
// ends the wait with the *InputError inside a *TaskAbandonedError.
func TestTaskInputUnanswered(t *testing.T) {
	ended := make(chan error, 1)
	srv := askingTaskServer(t, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		_, err := taskserver.Ask(ctx, req, map[string]mcp.InputRequest{"name": elicitName("name?")}, "who?")
		ended <- err
		return nil, err
	})
	var calls atomic.Int64
	c := dialModern(t, srv, "stdio", client.Options{Capabilities: tasksExtension,
		OnRequest: func(context.Context, string, json.RawMessage) (any, error) {
			calls.Add(1)
			return nil, errors.New("no one at the keyboard")
		}})
	_, err := c.CallToolTask(context.Background(), "ask", nil, nil, nil)
	var ta *client.TaskAbandonedError
	var ie *client.InputError
	if !errors.As(err, &ta) || !errors.As(err, &ie) || ie.Key != "name" || ta.CancelErr != nil || ta.Status != "input_required" {
		t.Fatalf("err = %v; want the task abandoned (and cancelled) for the unanswered name", err)
	}
	if !errors.Is(<-ended, tasks.ErrCancelled) {
		t.Fatal("the task did not end cancelled")
	}
	if calls.Load() != 1 {
		t.Fatalf("OnRequest was asked %d times; want once", calls.Load())
	}
}

// The time OnRequest takes to answer a task's input is not the task
// going quiet: with Idle at 2 s, an answer that takes 5 s is given, and
// the task completes.
func TestTaskInputIdleDoesNotRunWhileAnswering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var updated atomic.Bool
		var updates atomic.Int64
		c, _, _ := dialWith(t, &client.Options{Capabilities: tasksExtension,
			OnRequest: func(ctx context.Context, method string, _ json.RawMessage) (any, error) {
				time.Sleep(5 * time.Second) // a person, thinking
				return map[string]any{"roots": []any{}}, nil
			}}, func(f *fakeServer, m jsonrpc.Message) {
			switch m.Method {
			case mcp.MethodToolsCall:
				f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"task","taskId":"t1","status":"working","pollIntervalMs":1000}}`, m.ID)
			case mcp.MethodTasksGet:
				if updated.Load() {
					f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","taskId":"t1","status":"completed","result":{"content":[{"type":"text","text":"done"}]}}}`, m.ID)
					return
				}
				f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","taskId":"t1","status":"input_required","inputRequests":{"r":{"method":"roots/list"}}}}`, m.ID)
			case mcp.MethodTasksUpdate:
				updates.Add(1)
				updated.Store(containsMember(m.Params, "inputResponses"))
				f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete"}}`, m.ID)
			}
		})
		res, err := c.CallToolTask(context.Background(), "ask", nil, &client.CallOptions{Idle: 2 * time.Second, Max: time.Minute}, nil)
		if err != nil || firstText(res) != "done" || updates.Load() != 1 {
			t.Fatalf("ask = %+v, %v after %d tasks/update; want done after one", res, err, updates.Load())
		}
	})
}

func containsMember(params json.RawMessage, member string) bool {
	var obj map[string]json.RawMessage
	return json.Unmarshal(params, &obj) == nil && obj[member] != nil
}

package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/taskserver"
)

// A task started by one client (StartToolTask, which declares the tasks
// extension on its own request although the client's options do not) is
// followed to its end by another that knows only its id (FollowTask), as a
// process restarted with the id kept would: the input the task asks for
// is answered by the follower's per-call OnRequest.
func TestStartToolTaskThenFollowElsewhere(t *testing.T) {
	for _, over := range []string{"stdio", "http"} {
		t.Run(over, func(t *testing.T) {
			release := make(chan struct{})
			srv := askingTaskServer(t, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				<-release // the starter is gone before the work begins
				got, err := taskserver.Ask(ctx, req, map[string]mcp.InputRequest{"name": elicitName("name?")}, "who?")
				if err != nil {
					return nil, err
				}
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("hello " + accepted(t, got["name"]))}}, nil
			})
			starter := dialModern(t, srv, over, client.Options{})
			id, answered, err := starter.StartToolTask(context.Background(), "ask", nil, nil)
			if err != nil || answered != nil || id == "" {
				t.Fatalf("StartToolTask = %q, %+v, %v; want a task", id, answered, err)
			}
			starter.Close()
			close(release)
			follower := dialModern(t, srv, over, client.Options{})
			var asked []string
			var statuses []string
			res, err := follower.FollowTask(context.Background(), id,
				&client.CallOptions{OnRequest: answerWith(map[string]string{"name?": "Ada"}, &asked)},
				func(status, _ string) { statuses = append(statuses, status) })
			if err != nil || firstText(res) != "hello Ada" || len(asked) != 1 {
				t.Fatalf("FollowTask = %+v, %v (asked %v, statuses %v)", res, err, asked, statuses)
			}
		})
	}
}

// A tool the server answers at once is no task: StartToolTask returns
// its result, and no id.
func TestStartToolTaskAnsweredAtOnce(t *testing.T) {
	srv := askingTaskServer(t, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil })
	if err := srv.AddTool(server.Tool{Name: "now"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("done")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	c := dialModern(t, srv, "stdio", client.Options{})
	id, res, err := c.StartToolTask(context.Background(), "now", nil, nil)
	if err != nil || id != "" || firstText(res) != "done" {
		t.Fatalf("StartToolTask of a tool with no task = %q, %+v, %v", id, res, err)
	}
}

// FollowTask never cancels the task it follows: its context's end leaves
// the task running, to be followed again; CancelTask asks the server to
// cancel it, and a follow sees it end cancelled.
func TestFollowTaskLeavesTheTaskRunning(t *testing.T) {
	release := make(chan struct{})
	srv := askingTaskServer(t, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		for {
			select {
			case <-release:
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("done")}}, nil
			case <-time.After(5 * time.Millisecond):
			}
			if err := taskserver.Checkpoint(ctx, req, "waiting"); err != nil {
				return nil, err
			}
		}
	})
	c := dialModern(t, srv, "stdio", client.Options{})
	id, _, err := c.StartToolTask(context.Background(), "ask", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	_, err = c.FollowTask(ctx, id, nil, func(status, _ string) {
		if status == "working" {
			stop()
		}
	})
	var abandoned *client.TaskAbandonedError
	if !errors.As(err, &abandoned) || !abandoned.Left || c.Stats().Cancellations != 0 {
		t.Fatalf("a follow whose context ended = %v (cancellations sent: %d), want the task left running", err, c.Stats().Cancellations)
	}
	close(release)
	if res, err := c.FollowTask(context.Background(), id, nil, nil); err != nil || firstText(res) != "done" {
		t.Fatalf("following it again = %+v, %v", res, err)
	}

	other, _, err := c.StartToolTask(context.Background(), "ask", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// release is closed: the task may complete before the cancel lands,
	// which a follow reports as it is.
	if err := c.CancelTask(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	res, err := c.FollowTask(context.Background(), other, nil, nil)
	if !errors.Is(err, client.ErrTaskCancelled) && (err != nil || firstText(res) != "done") {
		t.Fatalf("following a task cancelled with CancelTask = %+v, %v", res, err)
	}
}

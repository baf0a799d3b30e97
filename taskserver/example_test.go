package taskserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
	"github.com/mcprel/mcprel/transport/stdio"
)

type exportArgs struct {
	Rows           int    `json:"rows"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

type exportResult struct {
	Rows int `json:"rows"`
}

// Two policies on one typed tool: the key is claimed around the task's
// creation (idempotency.Keyed first), so a retried creation gets the same
// task and the work runs once. The handler is an ordinary typed handler;
// in the task it reaches its checkpoints through taskserver.Checkpoint.
func ExampleAsTask() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	db, err := store.Open(ctx, filepath.Join(dir, "tasks.db"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	l, _ := ledger.Open(ctx, db, nil)
	st, _ := tasks.Open(ctx, db, nil)
	srv, _ := server.New(mcp.Implementation{Name: "exports", Version: "1.0.0"}, &server.Options{Logger: slog.New(slog.DiscardHandler)})
	ts, _ := taskserver.New(srv, st, nil)
	defer ts.Shutdown(ctx)

	var runs atomic.Int64
	err = server.AddTypedTool(srv, server.Tool{Name: "export", Policy: server.Policy{Timeout: server.TimeoutLong}},
		func(ctx context.Context, call *server.CallRequest, in exportArgs) (exportResult, error) {
			runs.Add(1)
			for row := range in.Rows {
				if err := taskserver.Checkpoint(ctx, call, fmt.Sprintf("row %d", row+1)); err != nil {
					return exportResult{}, err // cancelled, or shutting down
				}
			}
			return exportResult{Rows: in.Rows}, nil
		},
		idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyOptional}),
		taskserver.AsTask(ts, taskserver.Policy{}))
	if err != nil {
		fmt.Println(err)
		return
	}

	// A client that takes tasks, in process.
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	go stdio.NewConn(srv, toServer, fromServer, nil).Serve(ctx)
	c, err := client.Connect(ctx, toClient, fromClient, &client.Options{
		Capabilities: mcp.ClientCapabilities{Extensions: map[string]json.RawMessage{mcp.ExtensionTasks: json.RawMessage(`{}`)}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	args := exportArgs{Rows: 3, IdempotencyKey: "export-2026-12"}
	for range 2 { // the second is a retry whose first answer was lost
		res, err := c.CallToolTask(ctx, "export", args, nil, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		out, _ := json.Marshal(res.StructuredContent)
		fmt.Println(string(out))
	}
	fmt.Println("runs:", runs.Load())
	// Output:
	// {"rows":3}
	// {"rows":3}
	// runs: 1
}

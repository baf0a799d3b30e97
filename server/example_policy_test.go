package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

// auditLog is what the audited policy writes to.
type auditLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *auditLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, s)
}

// audited is a policy: it records every call of the tool and how it
// ended, around whatever runs inside it.
func audited(log *auditLog) server.ToolInterceptor {
	return func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
			res, err := next(ctx, call)
			outcome := "ok"
			if c, ok := res.(*mcp.CallToolResult); err != nil || (ok && c.IsError) {
				outcome = "refused"
			}
			log.add(call.Name + ": " + outcome)
			return res, err
		}, nil
	}
}

// quota is another: each tenant may call the tool n times. It gives the
// handler the calls left through a typed accessor, remaining.
func quota(n int) server.ToolInterceptor {
	return func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		var mu sync.Mutex
		used := map[string]int{}
		return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
			mu.Lock()
			left := n - used[call.Tenant]
			if left > 0 {
				used[call.Tenant]++
			}
			mu.Unlock()
			if left <= 0 {
				return nil, &mcp.ToolError{Code: "quota_exceeded", Message: "no calls left"}
			}
			call.Attach(quotaKey{}, left-1)
			return next(ctx, call)
		}, nil
	}
}

type quotaKey struct{}

// remaining is the quota policy's accessor: the calls the tenant has left
// after this one.
func remaining(call *server.CallRequest) int {
	left, _ := call.Attached(quotaKey{}).(int)
	return left
}

type greetArgs struct {
	Name string `json:"name"`
}

// Two policies stacked on one typed tool: audited is given first, so it
// runs outside quota and sees the calls quota refuses. The handler is the
// same as without them, and reads what quota gave it through remaining.
func Example_policies() {
	srv, _ := server.New(mcp.Implementation{Name: "example", Version: "1.0.0"}, &server.Options{Logger: slog.New(slog.DiscardHandler)})
	log := &auditLog{}
	err := server.AddTypedTool(srv, server.Tool{Name: "greet"},
		func(ctx context.Context, call *server.CallRequest, in greetArgs) (string, error) {
			return fmt.Sprintf("Hello, %s! (%d calls left)", in.Name, remaining(call)), nil
		},
		audited(log), quota(2))
	if err != nil {
		fmt.Println(err)
		return
	}

	// An in-process client, over a pair of pipes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	go stdio.NewConn(srv, toServer, fromServer, nil).Serve(ctx)
	c, err := client.Connect(ctx, toClient, fromClient, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	for _, name := range []string{"Ada", "Grace", "Edsger"} {
		res, err := c.CallTool(ctx, "greet", map[string]any{"name": name}, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if res.IsError {
			text = "refused: " + text
		}
		fmt.Println(text)
	}
	fmt.Println(strings.Join(log.entries, "; "))
	// Output:
	// Hello, Ada! (1 calls left)
	// Hello, Grace! (0 calls left)
	// refused: {"code":"quota_exceeded","message":"no calls left","retryable":false}
	// greet: ok; greet: ok; greet: refused
}

// Command mcpgo-server is an MCP server built with mcp-go
// (github.com/mark3labs/mcp-go), for mcprel's client to be tested
// against: echo, progress and wait, as gosdk-server's.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	addr := flag.String("http", "", "serve Streamable HTTP on this address and print its URL")
	stateful := flag.Bool("stateful", false, "with -http: keep 2025 sessions")
	flag.Parse()
	s := server.NewMCPServer("mcpgo-server", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("echo", mcp.WithString("text", mcp.Required())),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			text, _ := req.RequireString("text")
			return mcp.NewToolResultText(text), nil
		})
	s.AddTool(mcp.NewTool("progress", mcp.WithNumber("steps"), mcp.WithNumber("intervalMs")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			steps, interval := req.GetInt("steps", 1), req.GetInt("intervalMs", 0)
			var token any
			if req.Params.Meta != nil {
				token = req.Params.Meta.ProgressToken
			}
			for i := 1; i <= steps; i++ {
				select {
				case <-ctx.Done():
					fmt.Fprintln(os.Stderr, "handler-cancelled progress")
					return nil, ctx.Err()
				case <-time.After(time.Duration(interval) * time.Millisecond):
				}
				if token != nil {
					server.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress",
						map[string]any{"progressToken": token, "progress": i, "total": steps})
				}
			}
			return mcp.NewToolResultText(fmt.Sprintf("%d steps", steps)), nil
		})
	s.AddTool(mcp.NewTool("wait"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		fmt.Fprintln(os.Stderr, "handler-started wait")
		<-ctx.Done()
		fmt.Fprintln(os.Stderr, "handler-cancelled wait")
		return nil, ctx.Err()
	})
	var err error
	if *addr != "" {
		var ln net.Listener
		if ln, err = net.Listen("tcp", *addr); err == nil {
			mux := http.NewServeMux()
			mux.Handle("/mcp", server.NewStreamableHTTPServer(s, server.WithStateful(*stateful)))
			fmt.Printf("http://%s/mcp\n", ln.Addr())
			err = http.Serve(ln, mux)
		}
	} else {
		err = server.ServeStdio(s)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcpgo-server:", err)
		os.Exit(1)
	}
}

// Command peer-mcpgo is a benchmark peer: an MCP server built with
// github.com/mark3labs/mcp-go that serves one tool, echo, over stdio.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	s := server.NewMCPServer("peer-mcpgo", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("echo",
		mcp.WithDescription("Returns its text argument unchanged."),
		mcp.WithString("text", mcp.Required()),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		text, err := req.RequireString("text")
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		return mcp.NewToolResultText(text), nil
	})
	// ServeStdio writes only protocol to stdout; its error log goes to stderr.
	if err := server.ServeStdio(s); err != nil {
		fmt.Fprintln(os.Stderr, "peer-mcpgo:", err)
		os.Exit(1)
	}
}

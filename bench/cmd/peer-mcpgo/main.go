// Command peer-mcpgo is a benchmark peer: an MCP server built with
// github.com/mark3labs/mcp-go that serves one tool, echo, over stdio or, with
// -http, over Streamable HTTP.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	addr := flag.String("http", "", "serve Streamable HTTP on this address (e.g. 127.0.0.1:0) and print the endpoint URL on stdout")
	stateful := flag.Bool("stateful", false, "with -http: keep legacy sessions (WithStateful); the default mints session ids but keeps no state")
	flag.Parse()

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

	var err error
	if *addr != "" {
		// Modern (2026-07-28) requests are stateless whatever the option.
		err = serveHTTP(*addr, server.NewStreamableHTTPServer(s, server.WithStateful(*stateful)))
	} else {
		// ServeStdio writes only protocol to stdout; its error log goes to stderr.
		err = server.ServeStdio(s)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer-mcpgo:", err)
		os.Exit(1)
	}
}

// serveHTTP serves h at /mcp on addr, printing the endpoint URL once it
// accepts connections.
func serveHTTP(addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	return http.Serve(ln, mux)
}

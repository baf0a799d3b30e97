// Command peer-gosdk is a benchmark peer: an MCP server built with
// github.com/modelcontextprotocol/go-sdk that serves one tool, echo, over
// stdio or, with -http, over Streamable HTTP.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoArgs struct {
	Text string `json:"text" jsonschema:"text to return"`
}

func main() {
	addr := flag.String("http", "", "serve Streamable HTTP on this address (e.g. 127.0.0.1:0) and print the endpoint URL on stdout")
	stateless := flag.Bool("stateless", false, "with -http: Stateless mode, the only one that serves 2026-07-28; the default (stateful) serves the 2025 revisions")
	jsonResp := flag.Bool("json", false, "with -http: answer with application/json rather than an SSE stream (JSONResponse)")
	flag.Parse()

	s := mcp.NewServer(&mcp.Implementation{Name: "peer-gosdk", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Returns its text argument unchanged."},
		func(ctx context.Context, req *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})

	var err error
	if *addr != "" {
		err = serveHTTP(*addr, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
			&mcp.StreamableHTTPOptions{Stateless: *stateless, JSONResponse: *jsonResp}))
	} else {
		err = s.Run(context.Background(), &mcp.StdioTransport{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer-gosdk:", err)
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

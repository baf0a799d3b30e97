// Command gosdk-server is an MCP server built with the official Go SDK
// (github.com/modelcontextprotocol/go-sdk), for mcprel's client to be
// tested against: echo, progress (steps reports, intervalMs apart) and
// wait (blocks until cancelled, then says so on stderr). Over stdio, or
// Streamable HTTP with -http (its URL printed on stdout); with
// -oauth-issuer as well, an OAuth resource server guarded by the SDK's
// own auth.RequireBearerToken (see auth.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoArgs struct {
	Text string `json:"text"`
}

type progressArgs struct {
	Steps      int `json:"steps"`
	IntervalMs int `json:"intervalMs"`
}

func main() {
	addr := flag.String("http", "", "serve Streamable HTTP on this address and print its URL")
	stateless := flag.Bool("stateless", false, "with -http: Stateless mode (2026-07-28)")
	issuer := flag.String("oauth-issuer", "", "with -http: take only JWT access tokens this authorization server issued for the server's URL")
	scope := flag.String("oauth-scope", "mcp:tools", "with -oauth-issuer: the scopes a token must hold, space-separated")
	scopeFile := flag.String("oauth-scope-file", "", "with -oauth-issuer: read the scopes from this file at every request instead of -oauth-scope")
	tokenLog := flag.String("token-log", "", "with -oauth-issuer: append each token shown, and what the verifier made of it, to this file")
	flag.Parse()
	s := mcp.NewServer(&mcp.Implementation{Name: "gosdk-server", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "progress"}, func(ctx context.Context, req *mcp.CallToolRequest, in progressArgs) (*mcp.CallToolResult, any, error) {
		token := req.Params.GetProgressToken()
		for i := 1; i <= in.Steps; i++ {
			select {
			case <-ctx.Done():
				fmt.Fprintln(os.Stderr, "handler-cancelled progress")
				return nil, nil, ctx.Err()
			case <-time.After(time.Duration(in.IntervalMs) * time.Millisecond):
			}
			if token != nil {
				req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(i), Total: float64(in.Steps)})
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%d steps", in.Steps)}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "wait"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		fmt.Fprintln(os.Stderr, "handler-started wait")
		<-ctx.Done()
		fmt.Fprintln(os.Stderr, "handler-cancelled wait")
		return nil, nil, ctx.Err()
	})
	var err error
	if *addr != "" {
		err = serveHTTP(*addr, *issuer, *scope, *scopeFile, *tokenLog, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
			&mcp.StreamableHTTPOptions{Stateless: *stateless}))
	} else {
		err = s.Run(context.Background(), &mcp.StdioTransport{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gosdk-server:", err)
		os.Exit(1)
	}
}

func serveHTTP(addr, issuer, scope, scopeFile, tokenLog string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	endpoint := fmt.Sprintf("http://%s/mcp", ln.Addr())
	mux := http.NewServeMux()
	if issuer != "" {
		if err := protect(mux, h, endpoint, issuer, scope, scopeFile, tokenLog); err != nil {
			return err
		}
	} else {
		mux.Handle("/mcp", h)
	}
	fmt.Println(endpoint)
	return http.Serve(ln, mux)
}

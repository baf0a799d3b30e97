package goclients_test

import (
	"io"
	"os/exec"
	"path/filepath"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/client/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The interop scenario with the official Go SDK's and mcp-go's clients,
// in both eras over stdio and Streamable HTTP, through `mcprel gateway` in
// front of `mcprel serve --http`: every answer reaches the client as the
// server meant it, and a cancellation reaches the server as the gateway's
// own (the 2026-07-28 upstream's closed stream). mcp-go's 2025-era HTTP
// client sends no cancellation; through the gateway, as against the
// server, its call goes on until it leaves.
func TestGoClientsThroughGateway(t *testing.T) {
	const cause = "client closed the request stream"
	for _, era := range []string{"2025-11-25", "2026-07-28"} {
		t.Run("go-sdk/stdio/"+era, func(t *testing.T) {
			url, log := httpServer(t)
			cmd := exec.Command(binary, gatewayArgs(t, url, "--stdio")...)
			p := connectGoSDK(t, &mcp.CommandTransport{Command: cmd}, era)
			runScenario(t, p, log, cancelBehaviour{cause: cause})
		})
		t.Run("go-sdk/http/"+era, func(t *testing.T) {
			url, log := httpServer(t)
			p := connectGoSDK(t, &mcp.StreamableClientTransport{Endpoint: startGateway(t, url), MaxRetries: -1}, era)
			runScenario(t, p, log, cancelBehaviour{cause: cause})
		})
		t.Run("mcp-go/stdio/"+era, func(t *testing.T) {
			url, log := httpServer(t)
			tr := mcpgo.NewStdioWithOptions(binary, nil, gatewayArgs(t, url, "--stdio"))
			p := connectMCPGo(t, tr, era)
			runScenario(t, p, log, cancelBehaviour{cause: cause})
		})
		t.Run("mcp-go/http/"+era, func(t *testing.T) {
			url, log := httpServer(t)
			tr, err := mcpgo.NewStreamableHTTP(startGateway(t, url))
			if err != nil {
				t.Fatal(err)
			}
			p := connectMCPGo(t, tr, era)
			behaviour := cancelBehaviour{cause: cause}
			if era == "2025-11-25" {
				behaviour.gap = "mcp-go's 2025-era HTTP client sends no notifications/cancelled"
			}
			runScenario(t, p, log, behaviour)
		})
	}
}

// gatewayArgs is a gateway's command line in front of the server at url.
func gatewayArgs(t *testing.T, url string, serve ...string) []string {
	return append([]string{"gateway", "--db", filepath.Join(t.TempDir(), "gateway.db"), "--upstream", "demo=" + url}, serve...)
}

// startGateway runs a gateway over HTTP in front of the server at url and
// returns its endpoint URL.
func startGateway(t *testing.T, url string) string {
	t.Helper()
	endpoint, rest := startListening(t, gatewayArgs(t, url, "--http", "127.0.0.1:0")...)
	go io.Copy(io.Discard, rest)
	return endpoint
}

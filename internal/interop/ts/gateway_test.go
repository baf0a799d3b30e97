package ts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/internal/interop/gatewaycheck"
	"github.com/mcprel/mcprel/internal/interop/sdkauth"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
)

// A server built with the TypeScript SDK (1.32.2) behind mcprel's
// gateway, over stdio and Streamable HTTP, from every downstream
// transport and era: names and schemas, results, increasing progress, a
// downstream cancellation and a gateway deadline each reaching the SDK's
// handler as its abort.
func TestGatewayInFrontOfTypeScriptServer(t *testing.T) {
	requireNode(t)
	t.Run("stdio", func(t *testing.T) {
		gatewaycheck.Forwarding(t, client.Options{}, func(t *testing.T) gatewaycheck.Peer {
			return gatewaycheck.Peer{Upstream: gateway.Upstream{Name: "ts", Command: []string{"node", "ts-server.mjs"}}, Log: mcptest.NewLines(), CancelSeen: true}
		})
	})
	t.Run("http", func(t *testing.T) {
		gatewaycheck.Forwarding(t, client.Options{}, func(t *testing.T) gatewaycheck.Peer {
			log := mcptest.NewLines()
			return gatewaycheck.Peer{Upstream: gateway.Upstream{Name: "ts", URL: startTSServer(t, log)}, Log: log, CancelSeen: true}
		})
	})
}

// The TypeScript SDK server's mid-call elicitation, behind the gateway,
// reaches the downstream client that made the call and its answer gets
// back to the SDK's handler: as a request on a 2025 client's session, and
// through the gateway's own input_required round for a 2026-07-28 client,
// the SDK's call held open meanwhile.
func TestGatewayRelaysTypeScriptServersElicitation(t *testing.T) {
	requireNode(t)
	answer := func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		if method != mcp.MethodElicit || !strings.Contains(string(params), "What is your name?") {
			return nil, fmt.Errorf("unexpected %s %s", method, params)
		}
		return map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}}, nil
	}
	for _, up := range []string{"stdio", "http"} {
		for _, d := range gatewaycheck.Downstreams {
			t.Run(up+"/"+d.Name, func(t *testing.T) {
				u := gateway.Upstream{Name: "ts", Command: []string{"node", "ts-server.mjs"}}
				if up == "http" {
					u = gateway.Upstream{Name: "ts", URL: startTSServer(t, mcptest.NewLines())}
				}
				f := gatewaycheck.Start(t, gatewaycheck.Peer{Upstream: u, Log: mcptest.NewLines()}, gateway.Options{})
				c := f.Dial(t, d, client.Options{OnRequest: answer, Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)}})
				res, err := c.CallTool(context.Background(), "ask", nil, nil)
				if err != nil || res.IsError || len(res.Content) != 1 {
					t.Fatalf("ask: %+v, %v", res, err)
				}
				if text := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(text, `"action":"accept"`) || !strings.Contains(text, `"name":"Ada"`) {
					t.Fatalf("the SDK's handler got %s", text)
				}
			})
		}
	}
}

// The interop scenario with both official TypeScript SDK clients, in every
// era and transport they speak, against `mcprel gateway` in front of
// `mcprel serve --http`: every answer reaches the client as the server
// meant it, progress increases, and the aborted call is cancelled at the
// server by the gateway's own signal (the 2026-07-28 upstream's closed
// stream), its handler stopped.
func TestTypeScriptScenarioThroughGateway(t *testing.T) {
	requireNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := buildServer(t, ctx)
	for _, tc := range []struct{ sdk, era string }{
		{"v1", "legacy"},
		{"v2", "legacy"},
		{"v2", "modern"},
	} {
		for _, transport := range []string{"stdio", "http"} {
			t.Run(fmt.Sprintf("%s-%s-%s", tc.sdk, tc.era, transport), func(t *testing.T) {
				up := startHTTPServer(t, ctx, bin)
				dir := t.TempDir()
				gw := []string{"gateway", "--db", filepath.Join(dir, "gateway.db"), "--upstream", "demo=" + up.url}
				var target string
				if transport == "stdio" {
					target = fmt.Sprintf("exec %q %s --stdio 2>>%q", bin, quoteWords(gw), filepath.Join(dir, "gateway.log"))
				} else {
					target = startGateway(t, ctx, bin, append(gw, "--http", "127.0.0.1:0"))
				}
				cmd := exec.CommandContext(ctx, "node", "scenario-client.mjs", tc.sdk, tc.era, transport, target)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				cmd.Env = append(os.Environ(), nodeEnv...)
				cmd.WaitDelay = 10 * time.Second
				if err := cmd.Run(); err != nil {
					t.Fatalf("node scenario-client.mjs: %v\n%s\n%s", err, stdout.Bytes(), stderr.Bytes())
				}
				judgeTS(t, tc.era, "client closed the request stream", stdout.Bytes(), func(done func([]map[string]string) bool) []map[string]string {
					if !up.waitFor(ctx, done) {
						t.Fatal("the server's log never showed the aborted call cancelled and its handler stopped")
					}
					up.mu.Lock()
					defer up.mu.Unlock()
					return slices.Clone(up.log)
				})
			})
		}
	}
}

// startGateway runs mcprel with args, a gateway serving HTTP, and returns
// its endpoint URL, the first line of its stderr.
func startGateway(t *testing.T, ctx context.Context, bin string, args []string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), nodeEnv...)
	url, _ := sdkauth.StartHTTP(t, cmd)
	return url
}

// quoteWords is args as shell words.
func quoteWords(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, " ")
}

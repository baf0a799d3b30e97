package goclients_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcprel/mcprel/internal/interop/scenario"
)

// The official Go SDK's client (v1.8.0) in both eras it speaks: it probes
// with server/discover for 2026-07-28 and uses initialize when pinned to
// 2025-11-25.
func TestGoSDK(t *testing.T) {
	for _, era := range []struct{ name, version string }{
		{"2025-11-25", "2025-11-25"},
		{"2026-07-28", "2026-07-28"},
	} {
		t.Run("stdio/"+era.name, func(t *testing.T) {
			cmd, log := stdioServer(t)
			p := connectGoSDK(t, &mcp.CommandTransport{Command: cmd}, era.version)
			runScenario(t, p, log, cancelBehaviour{cause: "cancelled by the client"})
		})
		t.Run("http/"+era.name, func(t *testing.T) {
			url, log := httpServer(t)
			p := connectGoSDK(t, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, era.version)
			cause := "cancelled by the client"
			if era.version == "2026-07-28" {
				cause = "client closed the request stream"
			}
			runScenario(t, p, log, cancelBehaviour{cause: cause})
		})
	}
}

// goSDK is a go-sdk client session.
type goSDK struct {
	cs       *mcp.ClientSession
	mu       sync.Mutex
	progress map[string]func(float64) // by progress token
	next     atomic.Int64
}

func connectGoSDK(t *testing.T, transport mcp.Transport, version string) *goSDK {
	t.Helper()
	g := &goSDK{progress: map[string]func(float64){}}
	client := mcp.NewClient(&mcp.Implementation{Name: "mcprel-interop-gosdk", Version: "0.0.0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			g.mu.Lock()
			f := g.progress[fmt.Sprint(req.Params.ProgressToken)]
			g.mu.Unlock()
			if f != nil {
				f(req.Params.Progress)
			}
		},
	})
	cs, err := client.Connect(context.Background(), transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("negotiated %s, want %s", got, version)
	}
	g.cs = cs
	return g
}

func (g *goSDK) tools(ctx context.Context) ([]string, error) {
	res, err := g.cs.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names, nil
}

func (g *goSDK) call(ctx context.Context, step scenario.Step, onProgress func(float64)) (json.RawMessage, error) {
	params := &mcp.CallToolParams{Name: step.Tool, Arguments: step.Args}
	if step.Meta != nil {
		params.Meta = mcp.Meta{}
		for k, v := range step.Meta {
			params.Meta[k] = v
		}
	}
	if onProgress != nil {
		token := fmt.Sprintf("gosdk-%d", g.next.Add(1))
		params.SetProgressToken(token)
		g.mu.Lock()
		g.progress[token] = onProgress
		g.mu.Unlock()
	}
	res, err := g.cs.CallTool(ctx, params)
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

func (g *goSDK) close() error { return g.cs.Close() }

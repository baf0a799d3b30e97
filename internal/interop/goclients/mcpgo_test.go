package goclients_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcprel/mcprel/internal/interop/scenario"
)

// mcp-go's client (v1.2.1) in both eras it speaks: it probes with
// server/discover for 2026-07-28, and WithProtocolVersion("2025-11-25")
// keeps it on the initialize handshake.
func TestMCPGo(t *testing.T) {
	for _, era := range []struct{ name, version string }{
		{"2025-11-25", "2025-11-25"},
		{"2026-07-28", "2026-07-28"},
	} {
		t.Run("stdio/"+era.name, func(t *testing.T) {
			log := newServerLog()
			r, w := io.Pipe()
			go log.consume(r)
			t.Cleanup(func() { w.Close() })
			tr := transport.NewStdioWithOptions(binary, nil,
				[]string{"serve", "--stdio", "--db", filepath.Join(t.TempDir(), "ledger.db"), "--log-format", "json"},
				transport.WithCommandStderrWriter(w))
			p := connectMCPGo(t, tr, era.version)
			runScenario(t, p, log, cancelBehaviour{cause: "cancelled by the client"})
		})
		t.Run("http/"+era.name, func(t *testing.T) {
			url, log := httpServer(t)
			tr, err := transport.NewStreamableHTTP(url)
			if err != nil {
				t.Fatal(err)
			}
			p := connectMCPGo(t, tr, era.version)
			behaviour := cancelBehaviour{cause: "client closed the request stream"}
			if era.version == "2025-11-25" {
				// mcp-go's 2025 HTTP client only drops the request's
				// stream, which in that era is not a cancellation, and
				// never POSTs notifications/cancelled.
				behaviour = cancelBehaviour{gap: "mcp-go's 2025-era HTTP client sends no notifications/cancelled",
					cause: "streamhttp: session ended"}
			}
			runScenario(t, p, log, behaviour)
		})
	}
}

// mcpGo is an mcp-go client.
type mcpGo struct {
	c        *client.Client
	mu       sync.Mutex
	progress map[string]func(float64) // by progress token
	next     atomic.Int64
}

func connectMCPGo(t *testing.T, tr transport.Interface, version string) *mcpGo {
	t.Helper()
	m := &mcpGo{progress: map[string]func(float64){}}
	m.c = client.NewClient(tr, client.WithProtocolVersion(version))
	m.c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method != string(mcp.MethodNotificationProgress) {
			return
		}
		token := fmt.Sprint(n.Params.AdditionalFields["progressToken"])
		v, _ := n.Params.AdditionalFields["progress"].(float64)
		m.mu.Lock()
		f := m.progress[token]
		m.mu.Unlock()
		if f != nil {
			f(v)
		}
	})
	// Start wires the client's handlers to the transport (the transport
	// itself is already started; Start is idempotent).
	if err := m.c.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = version
	init.Params.ClientInfo = mcp.Implementation{Name: "mcprel-interop-mcpgo", Version: "0.0.0"}
	res, err := m.c.Initialize(context.Background(), init)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if res.ProtocolVersion != version {
		t.Fatalf("negotiated %s, want %s", res.ProtocolVersion, version)
	}
	return m
}

func (m *mcpGo) tools(ctx context.Context) ([]string, error) {
	res, err := m.c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names, nil
}

func (m *mcpGo) call(ctx context.Context, step scenario.Step, onProgress func(float64)) (json.RawMessage, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = step.Tool
	req.Params.Arguments = step.Args
	if step.Meta != nil || onProgress != nil {
		req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{}}
		for k, v := range step.Meta {
			req.Params.Meta.AdditionalFields[k] = v
		}
	}
	if onProgress != nil {
		token := fmt.Sprintf("mcpgo-%d", m.next.Add(1))
		req.Params.Meta.ProgressToken = token
		m.mu.Lock()
		m.progress[token] = onProgress
		m.mu.Unlock()
	}
	res, err := m.c.CallTool(ctx, req)
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

func (m *mcpGo) close() error { return m.c.Close() }

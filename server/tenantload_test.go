package server_test

import (
	"context"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// TenantLoads names the tenants whose calls run now, most first, at most
// as many as asked, and says how many there are; an idle server has none.
func TestTenantLoads(t *testing.T) {
	srv := mcptest.NewServer(t, &server.Options{Tenant: server.Limits{MaxConcurrent: 5}})
	gate := mcptest.NewGate(t, srv, "gate")
	if loads, total := srv.TenantLoads(10); len(loads) != 0 || total != 0 {
		t.Fatalf("idle: %v, %d", loads, total)
	}
	if srv.TenantLimits().MaxConcurrent != 5 {
		t.Errorf("limits %+v", srv.TenantLimits())
	}
	h := mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{Tokens: map[string]string{"a": "alice", "b": "bob"}})
	var wg sync.WaitGroup
	for i, token := range []string{"a", "a", "b"} {
		wg.Go(func() {
			resp := h.As(token).Modern(context.Background(), int64(i+1), mcp.MethodToolsCall, map[string]any{"name": "gate"})
			resp.Body.Close()
		})
		gate.WaitEntered(t)
	}
	loads, total := srv.TenantLoads(1)
	if total != 2 || len(loads) != 1 || loads[0].Tenant != "alice" || loads[0].Running != 2 || loads[0].Bytes == 0 {
		t.Errorf("top 1: %+v of %d", loads, total)
	}
	if loads, _ := srv.TenantLoads(10); len(loads) != 2 || loads[1].Tenant != "bob" || loads[1].Running != 1 {
		t.Errorf("all: %+v", loads)
	}
	gate.Release()
	wg.Wait()
}

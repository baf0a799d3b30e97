package goservers

import (
	"os/exec"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/internal/interop/gatewaycheck"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
)

// The official Go SDK's and mcp-go's servers behind mcprel's gateway, over
// stdio and Streamable HTTP in every era each serves, from every
// downstream transport and era: names and schemas, results, increasing
// progress, a downstream cancellation and a gateway deadline each reaching
// the peer's handler as its own cancellation.
func TestGatewayInFrontOfGoPeers(t *testing.T) {
	gosdk, mcpgo := build(t, "gosdk-server"), build(t, "mcpgo-server")
	stdio := func(bin string, era mcp.Era) func(*testing.T) gatewaycheck.Peer {
		return func(t *testing.T) gatewaycheck.Peer {
			return gatewaycheck.Peer{Upstream: gateway.Upstream{Name: "peer", Command: []string{bin}}, Log: mcptest.NewLines(), CancelSeen: true}
		}
	}
	http := func(bin string, args ...string) func(*testing.T) gatewaycheck.Peer {
		return func(t *testing.T) gatewaycheck.Peer {
			log := mcptest.NewLines()
			cmd := exec.Command(bin, args...)
			cmd.Stderr = log
			return gatewaycheck.Peer{Upstream: gateway.Upstream{Name: "peer", URL: mcptest.StartURL(t, cmd)}, Log: log, CancelSeen: true}
		}
	}
	for _, p := range []struct {
		name  string
		era   mcp.Era // the era the gateway is pinned to with the peer (0: negotiated)
		start func(*testing.T) gatewaycheck.Peer
		gap   string
	}{
		{name: "go-sdk/stdio", start: stdio(gosdk, 0)},
		{name: "go-sdk/stdio/2025", era: mcp.Legacy, start: stdio(gosdk, mcp.Legacy)},
		{name: "go-sdk/http/2025", start: http(gosdk, "-http", "127.0.0.1:0")},
		{name: "go-sdk/http/2026", start: http(gosdk, "-http", "127.0.0.1:0", "-stateless"),
			gap: "go-sdk v1.8.0's stateless handler does not end a tool handler when its request's stream closes"},
		{name: "mcp-go/stdio", start: stdio(mcpgo, 0)},
		{name: "mcp-go/stdio/2025", era: mcp.Legacy, start: stdio(mcpgo, mcp.Legacy)},
		{name: "mcp-go/http/2025", era: mcp.Legacy, start: http(mcpgo, "-http", "127.0.0.1:0", "-stateful")},
		{name: "mcp-go/http/2026", start: http(mcpgo, "-http", "127.0.0.1:0")},
	} {
		t.Run(p.name, func(t *testing.T) {
			gatewaycheck.Forwarding(t, client.Options{Era: p.era}, func(t *testing.T) gatewaycheck.Peer {
				peer := p.start(t)
				if p.gap != "" {
					peer.CancelSeen, peer.Gap = false, p.gap
				}
				return peer
			})
		})
	}
}

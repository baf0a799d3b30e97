package client_test

import (
	"context"
	"io"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/transport/stdio"
)

// BenchmarkCallEcho is one echo tools/call through package client to an
// mcprel server in process over stdio pipes, per era: what a call costs
// the two ends together, in time and allocations, without another
// process. The eras should cost about the same: a 2026-07-28 request
// carries its version and capabilities in _meta, nothing more.
func BenchmarkCallEcho(b *testing.B) {
	for _, era := range []mcp.Era{mcp.Legacy, mcp.Modern} {
		b.Run(era.String(), func(b *testing.B) {
			srv := mcptest.NewServer(b, nil)
			mcptest.AddEcho(b, srv)
			toServer, fromClient := io.Pipe()
			toClient, fromServer := io.Pipe()
			conn := stdio.NewConn(srv, toServer, fromServer, nil)
			done := make(chan struct{})
			go func() { conn.Serve(context.Background()); fromServer.Close(); close(done) }()
			c, err := client.Connect(context.Background(), toClient, fromClient, &client.Options{Era: era})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { c.Close(); <-done }()
			args := map[string]any{"text": "hello"}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.CallToolRaw(ctx, "echo", args, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package client_test

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

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

// BenchmarkCallForwarded is BenchmarkCallEcho as a gateway makes the
// call upstream: raw arguments, both clocks, progress, notification and
// request callbacks, the caller's capabilities (and, in one case, a
// _meta member of the caller's) given per call, through two interceptors
// that pass it on (as the gateway's retry and circuit ones do when
// nothing fails): what package client adds to each forwarded call.
func BenchmarkCallForwarded(b *testing.B) {
	pass := func(next client.CallFunc) client.CallFunc {
		return func(ctx context.Context, req *client.Request) (json.RawMessage, error) { return next(ctx, req) }
	}
	cases := []struct {
		name string
		era  mcp.Era
		meta map[string]any
	}{
		{"2026", mcp.Modern, nil},
		{"2026-meta", mcp.Modern, map[string]any{"com.example/trace": json.RawMessage(`{"id":"abc"}`)}},
		{"2025-meta", mcp.Legacy, map[string]any{"com.example/trace": json.RawMessage(`{"id":"abc"}`)}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			srv := mcptest.NewServer(b, nil)
			mcptest.AddEcho(b, srv)
			toServer, fromClient := io.Pipe()
			toClient, fromServer := io.Pipe()
			conn := stdio.NewConn(srv, toServer, fromServer, nil)
			done := make(chan struct{})
			go func() { conn.Serve(context.Background()); fromServer.Close(); close(done) }()
			c, err := client.Connect(context.Background(), toClient, fromClient, &client.Options{Era: tc.era,
				Interceptors: []client.Interceptor{pass, pass}})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { c.Close(); <-done }()
			args := json.RawMessage(`{"text":"hello"}`)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				caps := mcp.ClientCapabilities{Elicitation: json.RawMessage(`{"form":{}}`), Sampling: json.RawMessage(`{}`)}
				o := &client.CallOptions{Idle: time.Minute, Max: time.Hour,
					OnProgress:     func(client.Progress) {},
					OnNotification: func(string, json.RawMessage) {},
					OnRequest:      func(context.Context, string, json.RawMessage) (any, error) { return nil, nil },
					Meta:           tc.meta, Capabilities: &caps}
				if _, err := c.CallToolRaw(ctx, "echo", args, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

// BenchmarkForwardEcho is echo calls from 16 callers through a gateway
// (in this process, a client over in-memory stdio in front of it) to a
// stdio upstream (this test binary as an mcprel server): what the gateway
// costs per call, for a profile. mcpbench measures it against the
// upstream alone, from outside.
func BenchmarkForwardEcho(b *testing.B) {
	for _, era := range eras {
		b.Run("downstream-"+era.name, func(b *testing.B) {
			front := mcptest.NewServer(b, &server.Options{MaxConcurrentCalls: 256})
			gw, err := gateway.New(front, &gateway.Options{
				Upstreams: []gateway.Upstream{{Name: "up", Command: []string{os.Args[0], "-test.run=^$"}, Env: []string{stdioUpstreamEnv + "=1"}}},
				Logger:    slog.New(slog.DiscardHandler),
			})
			if err != nil {
				b.Fatal(err)
			}
			if err := gw.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer gw.Close()
			toServer, fromClient := pipePair()
			toClient, fromServer := pipePair()
			go stdio.NewConn(front, toServer, fromServer, nil).Serve(context.Background())
			c, err := client.Connect(context.Background(), toClient, fromClient, &client.Options{Era: era.era})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var n atomic.Int64
			b.SetParallelism(8) // 16 callers on 2 CPUs
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					text := fmt.Sprint("call ", n.Add(1))
					res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": text}, nil)
					if err != nil || res.IsError {
						b.Fatalf("echo: %+v, %v", res, err)
					}
				}
			})
		})
	}
}

func pipePair() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }

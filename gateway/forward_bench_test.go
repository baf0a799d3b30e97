package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"testing"

	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

// BenchmarkForwardRaw is BenchmarkForwardEcho with the downstream client
// taken out: 16 echo calls kept in flight as pre-encoded frames, written
// to the gateway's stdio server and its answers only counted, as mcpbench
// does from outside. What this process spends is then the gateway's own
// (its front server, its forwarding and its client of the upstream, which
// is this test binary as an mcprel server, in a process of its own), so
// its -cpuprofile is the gateway process's profile under load, and its
// cpu-ns/op the CPU this process spent per call, which the machine's
// other load changes far less than ns/op.
func BenchmarkForwardRaw(b *testing.B) {
	const window = 16
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
			toServer, fromClient := io.Pipe()
			toClient, fromServer := io.Pipe()
			go stdio.NewConn(front, toServer, fromServer, nil).Serve(context.Background())
			defer fromClient.Close()
			lines := bufio.NewReaderSize(toClient, 64<<10)

			meta := ""
			if era.era == mcp.Modern {
				meta = `,"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
			} else {
				fmt.Fprintf(fromClient, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{},"clientInfo":{"name":"bench","version":"0"},"protocolVersion":"2025-11-25"}}`+"\n")
				if _, err := lines.ReadBytes('\n'); err != nil {
					b.Fatal(err)
				}
				fmt.Fprintf(fromClient, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
			}
			frame := func(id int) []byte {
				return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"call %d"}%s}}`+"\n", id, id, meta)
			}

			slots := make(chan struct{}, window)
			failed := make(chan error, 1)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for n := 0; n < b.N; n++ {
					line, err := lines.ReadBytes('\n')
					if err != nil {
						failed <- err
						return
					}
					if !bytes.Contains(line, []byte(`"result":`)) || bytes.Contains(line, []byte(`"isError":true`)) {
						failed <- fmt.Errorf("answer %d: %s", n, line)
						return
					}
					<-slots
				}
			}()
			frames := make([][]byte, b.N)
			for i := range frames {
				frames[i] = frame(i + 1)
			}
			cpu0 := processCPU()
			b.ResetTimer()
			for _, f := range frames {
				select {
				case slots <- struct{}{}:
				case err := <-failed:
					b.Fatal(err)
				}
				if _, err := fromClient.Write(f); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-done:
			case err := <-failed:
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			select {
			case err := <-failed:
				b.Fatal(err)
			default:
			}
		})
	}
}

// processCPU is the user and system CPU this process has used, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

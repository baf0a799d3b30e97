package idempotency_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/transport/stdio"
)

// addBenchTool registers the keyed tool the benchmark calls: one row per
// execution, written in the ledger's transaction.
func addBenchTool(srv *server.Server, l *ledger.Ledger) error {
	return srv.AddTool(server.Tool{Name: "reserve"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		_, err := idempotency.Tx(req).Exec(ctx, `INSERT INTO bench_rows (n) VALUES (1)`)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("reserved")}}, err
	}, idempotency.Keyed(l, idempotency.Policy{}))
}

// BenchmarkKeyedCall is one keyed tools/call round trip through the server
// in process over stdio (2026-07-28), on SQLite at its default
// synchronous=FULL: "fresh" claims a new key and commits its effect and
// result; "replay" answers a key already used from its record.
func BenchmarkKeyedCall(b *testing.B) {
	for _, mode := range []string{"fresh", "replay"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			db, err := store.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if err := db.Migrate(ctx, "bench", []store.Migration{{Version: 1, SQL: `CREATE TABLE bench_rows (n INTEGER)`}}); err != nil {
				b.Fatal(err)
			}
			l, err := ledger.Open(ctx, db, nil)
			if err != nil {
				b.Fatal(err)
			}
			srv, err := server.New(mcp.Implementation{Name: "bench", Version: "1"}, &server.Options{
				Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			if err != nil {
				b.Fatal(err)
			}
			if err := addBenchTool(srv, l); err != nil {
				b.Fatal(err)
			}
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			served := make(chan error, 1)
			go func() { served <- stdio.NewConn(srv, inR, outW, nil).Serve(ctx) }()
			out := bufio.NewReader(outR)
			call := func(id int, key string) {
				frame := `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{"name":"reserve","arguments":{"idempotencyKey":"` + key + `"},` +
					`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}` + "\n"
				if _, err := io.WriteString(inW, frame); err != nil {
					b.Fatal(err)
				}
				line, err := out.ReadSlice('\n')
				if err != nil || !bytes.Contains(line, []byte(`"reserved"`)) {
					b.Fatalf("response %q, %v", line, err)
				}
			}
			call(0, "k-once")
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				key := "k-once"
				if mode == "fresh" {
					key = "k-" + strconv.Itoa(i)
				}
				call(i+1, key)
			}
			b.StopTimer()
			inW.Close()
			go io.Copy(io.Discard, out)
			<-served
		})
	}
}

package server_test

import (
	"bufio"
	"bytes"
	"context"
	"github.com/mcprel/mcprel/logbuf"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// benchServer is a server with the echo tool mcpbench calls, logging at
// warn as a production server would.
func benchServer(b *testing.B) *server.Server { return benchServerAt(b, slog.LevelWarn) }

// benchServerAt is benchServer logging at level: at info, one line per
// request, through the handler and the batching writer mcprel serve uses.
func benchServerAt(b *testing.B, level slog.Level) *server.Server {
	b.Helper()
	logs := logbuf.New(io.Discard, nil)
	b.Cleanup(func() { logs.Close() })
	srv := mcptest.NewServer(b, &server.Options{
		Logger: slog.New(logbuf.Handler(logbuf.NewTextHandler(logs, &slog.HandlerOptions{Level: level}), logs)),
	})
	mcptest.AddEcho(b, srv)
	return srv
}

const (
	modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	echoParams = `"name":"echo","arguments":{"text":"hello"}`
)

// echoRequest is a tools/call of echo with id.
func echoRequest(id int, modern bool) []byte {
	params := echoParams
	if modern {
		params += "," + modernMeta
	}
	return []byte(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{` + params + `}}`)
}

// BenchmarkEchoCall is one echo tools/call round trip through the server
// in process, per transport and era: what the server itself costs, in time
// and allocations, without the network or another process. The allocations
// include the benchmark's own request bytes and response reading, a few per
// call, the same in every run.
func BenchmarkEchoCall(b *testing.B) {
	for _, modern := range []bool{false, true} {
		era := "legacy"
		if modern {
			era = "modern"
		}
		b.Run("stdio-"+era, func(b *testing.B) { benchStdio(b, benchServer(b), modern) })
		b.Run("stdio-"+era+"-logged", func(b *testing.B) { benchStdio(b, benchServerAt(b, slog.LevelInfo), modern) })
		b.Run("http-"+era, func(b *testing.B) { benchHTTP(b, modern) })
	}
}

func benchStdio(b *testing.B, srv *server.Server, modern bool) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	conn := stdio.NewConn(srv, inR, outW, nil)
	served := make(chan error, 1)
	go func() { served <- conn.Serve(context.Background()) }()
	out := bufio.NewReader(outR)
	send := func(frame []byte) {
		if _, err := inW.Write(append(frame, '\n')); err != nil {
			b.Fatal(err)
		}
	}
	if !modern {
		send([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`))
		if _, err := out.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
		send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		send(echoRequest(i+1, modern))
		line, err := out.ReadSlice('\n')
		if err != nil || !bytes.Contains(line, []byte(`"hello"`)) {
			b.Fatalf("response %q, %v", line, err)
		}
	}
	b.StopTimer()
	inW.Close()
	go io.Copy(io.Discard, out)
	<-served
}

func benchHTTP(b *testing.B, modern bool) {
	srv := benchServer(b)
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	post := func(body []byte, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	hdr := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
	if !modern {
		w := post([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`), nil)
		hdr = map[string]string{"Mcp-Protocol-Version": "2025-11-25", "Mcp-Session-Id": w.Header().Get("Mcp-Session-Id")}
		post([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), hdr)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		w := post(echoRequest(i+1, modern), hdr)
		if w.Code != http.StatusOK || !bytes.Contains(w.Body.Bytes(), []byte(`"hello"`)) {
			b.Fatalf("response %d %q", w.Code, w.Body.Bytes())
		}
	}
}

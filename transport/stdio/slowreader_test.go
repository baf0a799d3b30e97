package stdio_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

// TestSlowReaderGetsTheResult: a client that reads nothing while a call
// reports 100,000 progress values still receives the final response, with
// the refetch flag set, and the server never holds more than its outbound queue
// capacity for it.
func TestSlowReaderGetsTheResult(t *testing.T) {
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{QueueCapacity: 16, ProgressInterval: time.Nanosecond}))
	addTool := func(name string, f func(req *server.CallRequest)) {
		srv.AddTool(server.Tool{Name: name}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			f(req)
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("done")}}, nil
		})
	}
	addTool("chatty", func(req *server.CallRequest) {
		for v := 1; v <= 100_000; v++ {
			req.ReportProgress(float64(v), 100_000, "")
		}
	})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe() // unbuffered: nothing is written until we read
	conn := stdio.NewConn(srv, inR, outW, nil)
	go conn.Serve(context.Background())
	t.Cleanup(func() { inW.Close(); outR.Close() })

	io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"chatty","_meta":{"progressToken":"c","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`+"\n")
	// Read nothing until the handler has reported everything and returned.
	rec.WaitHandler(t, jsonrpc.IntID(1))

	lines := bufio.NewScanner(outR)
	var progress []float64
	var final string
	for final == "" && lines.Scan() {
		var f struct {
			ID     *json.RawMessage   `json:"id"`
			Params mcp.ProgressParams `json:"params"`
		}
		json.Unmarshal(lines.Bytes(), &f)
		if f.ID != nil {
			final = lines.Text()
		} else {
			progress = append(progress, f.Params.Progress)
		}
	}
	if !strings.Contains(final, `"dev.mcprel/refetch":true`) || !strings.Contains(final, `"done"`) {
		t.Fatalf("final = %s, want the result with the refetch flag", final)
	}
	if len(progress) == 0 || progress[len(progress)-1] != 100_000 || len(progress) > 16 {
		t.Fatalf("%d progress notifications, last %v: want at most the queue capacity, ending at 100000", len(progress), progress)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i] <= progress[i-1] {
			t.Fatalf("progress not increasing: %v", progress)
		}
	}
	// The record accounts for every report: replaced, dropped or delivered.
	r := rec.WaitRequest(t, jsonrpc.IntID(1))
	if r.ProgressCoalesced == 0 || r.ProgressCoalesced+r.ProgressDropped+uint64(len(progress)) != 100_000 {
		t.Fatalf("record: %d coalesced, %d dropped, %d delivered; want them to add up to 100000",
			r.ProgressCoalesced, r.ProgressDropped, len(progress))
	}
}

// TestStalledReaderEndsTheConnection: a client that stops reading for longer
// than the write timeout loses the connection; its calls are cancelled with
// ErrSlowConsumer and Serve returns, instead of a goroutine pinned forever.
// It runs on fake time.
func TestStalledReaderEndsTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := mcptest.NewRecorder()
		srv := mcptest.NewServer(t, rec.Hook(nil))
		gate := mcptest.NewGate(t, srv, "gate")
		inR, inW := io.Pipe()
		outR, outW := io.Pipe() // never read
		conn := stdio.NewConn(srv, inR, outW, &stdio.Options{WriteTimeout: 5 * time.Second})
		served := make(chan error, 1)
		go func() { served <- conn.Serve(context.Background()) }()

		start := time.Now()
		io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gate","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`+"\n")
		gate.WaitEntered(t)
		// A response that can never be written starts the write clock.
		io.WriteString(inW, `{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`+"\n")
		if r := rec.WaitRequest(t, jsonrpc.IntID(1)); r.Outcome != server.Cancelled || r.Cause != server.ErrSlowConsumer {
			t.Fatalf("record = %+v, want cancelled by a slow consumer", r)
		}
		if evs := rec.Events(); len(evs) != 1 || evs[0] != (server.Event{Kind: server.EventSlowConsumer, Transport: "stdio"}) {
			t.Fatalf("events = %+v, want one slow consumer cut off", evs)
		}
		// The write clock starts when the discover request is read: after
		// the gate call held the reading goroutine for its inline budget
		// (100 µs) and another goroutine took over reading.
		if waited := time.Since(start); waited < 5*time.Second || waited > 5*time.Second+time.Millisecond {
			t.Fatalf("gave up after %v, want the write timeout of 5s", waited)
		}
		gate.Release()
		if err := <-served; err == nil {
			t.Fatal("Serve returned nil after giving up a stalled client")
		}
		inW.Close()
		outR.Close() // frees the abandoned writer
	})
}

// Negative options are an error, as in server.Options, not the default.
func TestNegativeOptionsAreRefused(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	for _, opts := range []stdio.Options{{MaxMessageBytes: -1}, {CloseGrace: -time.Second}, {WriteTimeout: -1}} {
		c := stdio.NewConn(srv, strings.NewReader(""), io.Discard, &opts)
		if err := c.Serve(context.Background()); err == nil || !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("Serve with %+v: %v, want a refusal", opts, err)
		}
	}
}

package client_test

import (
	"context"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// raceEnabled is set under go test -race (race_test.go).
var raceEnabled bool

// TestEventStreamBufferIsReused: a call with a progress token over
// Streamable HTTP is answered with an event stream (so is every call the
// gateway forwards to an HTTP upstream), and the client read each stream through
// a 64 KiB buffer of its own, allocated and cleared for every call. Ended
// streams now hand theirs on, so a call costs the client and the server
// together far less than one such buffer.
func TestEventStreamBufferIsReused(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	mcptest.AddEcho(t, srv)
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	defer hs.Close()
	ctx := context.Background()
	c, err := client.DialHTTP(ctx, hs.URL, &client.Options{Era: mcp.Legacy})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func() {
		res, err := c.CallTool(ctx, "echo", map[string]any{"text": "hi"}, &client.CallOptions{OnProgress: func(client.Progress) {}})
		if err != nil || res.IsError {
			t.Fatalf("echo: %v %+v", err, res)
		}
	}
	call()
	const calls = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		call()
	}
	runtime.ReadMemStats(&after)
	perCall := (after.TotalAlloc - before.TotalAlloc) / calls
	t.Logf("%d bytes allocated per call", perCall)
	// The race detector's pool drops a share of what is put back: under it
	// a share of the calls still allocate a buffer.
	limit := uint64(48 << 10)
	if raceEnabled {
		limit = 80 << 10
	}
	if perCall > limit {
		t.Errorf("%d bytes allocated per call, over %d: the event stream's buffer is not reused", perCall, limit)
	}
}

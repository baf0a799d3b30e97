package streamhttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// advertisedCapacity reads the queue capacity the one tool of a
// tools/list result advertises.
func advertisedCapacity(t *testing.T, result json.RawMessage) float64 {
	t.Helper()
	var res mcp.ListToolsResult
	if err := json.Unmarshal(result, &res); err != nil || len(res.Tools) != 1 {
		t.Fatalf("tools/list answered %s (%v)", result, err)
	}
	n, ok := res.Tools[0].Meta[mcp.MetaQueueCapacity].(float64)
	if !ok {
		t.Fatalf("the tool advertises no %s: %s", mcp.MetaQueueCapacity, result)
	}
	return n
}

// readResult reads the result of an HTTP answer, a JSON body or an SSE
// stream.
func readResult(t *testing.T, resp *http.Response) json.RawMessage {
	t.Helper()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		f := mcptest.ReadJSON(t, resp)
		if f.Error != nil {
			t.Fatalf("tools/list: %s", f.Raw)
		}
		return f.Result
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m struct{ Result json.RawMessage }
			if json.Unmarshal([]byte(data), &m) == nil && m.Result != nil {
				return m.Result
			}
		}
	}
	t.Fatalf("tools/list: no result on the stream")
	return nil
}

// What a tool says of its flow control is true on the transport that
// lists it: the server's QueueCapacity over stdio, which sizes a stdio
// connection's outbound queue, and the handler's StreamCapacity over Streamable
// HTTP, which sizes each response stream, in both eras.
func TestAdvertisedCapacityIsTheTransports(t *testing.T) {
	srv := mcptest.NewServer(t, &server.Options{QueueCapacity: 64})
	mcptest.NewGate(t, srv, "gate")

	c := mcptest.Stdio(t, srv, nil)
	if n := advertisedCapacity(t, c.Call(1, mcp.MethodToolsList, mcptest.Params(mcp.Modern, nil)).Result); n != 64 {
		t.Errorf("stdio advertises %v; its outbound queue holds the server's 64", n)
	}

	for _, tc := range []struct {
		name string
		opts *streamhttp.HandlerOptions
		want float64
	}{
		{"StreamCapacity 32", &streamhttp.HandlerOptions{StreamCapacity: 32}, 32},
		{"StreamCapacity 64", &streamhttp.HandlerOptions{StreamCapacity: 64}, 64},
		{"the default", nil, streamhttp.DefaultStreamCapacity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := mcptest.HTTP(t, srv, tc.opts)
			if n := advertisedCapacity(t, readResult(t, hc.Modern(context.Background(), 1, mcp.MethodToolsList, nil))); n != tc.want {
				t.Errorf("2026-07-28 HTTP advertises %v; its streams hold %v", n, tc.want)
			}
			hc.Initialize(nil)
			if n := advertisedCapacity(t, readResult(t, hc.Legacy(context.Background(), 2, mcp.MethodToolsList, nil))); n != tc.want {
				t.Errorf("2025-11-25 HTTP advertises %v; its streams hold %v", n, tc.want)
			}
		})
	}
	// The server's own list is not changed by what a session showed.
	if n := advertisedCapacity(t, c.Call(2, mcp.MethodToolsList, mcptest.Params(mcp.Modern, nil)).Result); n != 64 {
		t.Errorf("stdio advertises %v after HTTP listed; want 64", n)
	}
}

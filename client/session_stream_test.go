package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// A 2025 server sends an elicitation that is tied to no request on the
// session's own stream, and drops it when no such stream is open yet (as
// the TypeScript SDK's server does). The server is slow to answer the GET;
// the client's first call must still find the stream open, so the
// elicitation reaches the client and the call completes.
func TestFirstCallFindsTheSessionStreamOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var stream chan string // what the session's stream should carry; nil until it is open
		answered := make(chan json.RawMessage, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				time.Sleep(time.Second) // a slow server
				events := make(chan string, 1)
				mu.Lock()
				stream = events
				mu.Unlock()
				w.Header().Set("Content-Type", "text/event-stream")
				w.(http.Flusher).Flush()
				for {
					select {
					case e := <-events:
						fmt.Fprint(w, e)
						w.(http.Flusher).Flush()
					case <-r.Context().Done():
						return
					}
				}
			}
			m := readPosted(r)
			w.Header().Set("Mcp-Session-Id", "s1")
			switch {
			case m.Method == mcp.MethodInitialize:
				answerInitialize(w, m.ID, "standalone")
			case m.Method == mcp.MethodToolsCall:
				mu.Lock()
				events := stream
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				if events == nil {
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"isError":true,"content":[{"type":"text","text":"no session stream: the elicitation was dropped"}]}}`, m.ID)
					return
				}
				events <- `data: {"jsonrpc":"2.0","id":"ask","method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object","properties":{}}}}` + "\n\n"
				text, _ := json.Marshal("elicited " + string(<-answered))
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%s}]}}`, m.ID, text)
			case m.Method == "" && m.Result != nil: // the elicitation's answer
				answered <- m.Result
				w.WriteHeader(http.StatusAccepted)
			case m.ID == nil:
				w.WriteHeader(http.StatusAccepted)
			default: // server/discover: this is a 2025 server
				w.WriteHeader(http.StatusBadRequest)
			}
		})
		c, err := client.DialHTTP(context.Background(), "http://127.0.0.1/mcp", &client.Options{HTTPClient: servePipe(t, h),
			OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
				return map[string]any{"action": "accept", "content": map[string]any{}}, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		res, err := c.CallTool(context.Background(), "ask", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || len(res.Content) != 1 {
			t.Fatalf("the call's result: %+v", res)
		}
		text, ok := res.Content[0].(*mcp.TextContent)
		if !ok || text.Text != `elicited {"action":"accept","content":{}}` {
			t.Fatalf("the call's result says %+v", res.Content[0])
		}
	})
}

// A server that never answers the GET does not hold the client up longer
// than the probe timeout.
func TestSilentSessionStreamDoesNotHoldConnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				<-r.Context().Done() // no headers, ever
				return
			}
			m := readPosted(r)
			w.Header().Set("Mcp-Session-Id", "s1")
			switch {
			case m.Method == mcp.MethodInitialize:
				answerInitialize(w, m.ID, "silent")
			case m.ID == nil:
				w.WriteHeader(http.StatusAccepted)
			default:
				w.WriteHeader(http.StatusBadRequest)
			}
		})
		start := time.Now()
		c, err := client.DialHTTP(context.Background(), "http://127.0.0.1/mcp", &client.Options{HTTPClient: servePipe(t, h), ProbeTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if took := time.Since(start); took != 2*time.Second {
			t.Fatalf("connecting took %v; want the probe timeout, 2s", took)
		}
	})
}

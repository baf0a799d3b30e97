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

// A 2025 server that ends a call's stream before its response, having
// said "retry: 500": the client comes back exactly 500 ms later with a GET
// carrying Last-Event-ID, and reads the response there. Elicitation
// requests on the stream are answered with a POST.
func TestResumesWithLastEventID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var closedAt, resumedAt time.Time
		var lastEventID string
		var elicited json.RawMessage
		pending := make(chan string, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") == "" {
				// The session's own stream: open, quiet, until the client
				// closes.
				w.Header().Set("Content-Type", "text/event-stream")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				return
			}
			if r.Method == http.MethodGet {
				mu.Lock()
				resumedAt, lastEventID = time.Now(), r.Header.Get("Last-Event-ID")
				mu.Unlock()
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "id: e2\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"resumed\"}]}}\n\n", <-pending)
				return
			}
			m := readPosted(r)
			w.Header().Set("Mcp-Session-Id", "s1")
			switch {
			case m.Method == mcp.MethodInitialize:
				answerInitialize(w, m.ID, "resume")
			case m.Method == mcp.MethodToolsCall:
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "id: e1\nretry: 500\ndata: \n\n")
				fmt.Fprint(w, `data: {"jsonrpc":"2.0","id":"ask","method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object","properties":{}}}}`+"\n\n")
				w.(http.Flusher).Flush()
				time.Sleep(50 * time.Millisecond)
				mu.Lock()
				closedAt = time.Now()
				mu.Unlock()
				pending <- string(m.ID)
			case m.Method == "" && m.Result != nil: // the elicitation's answer
				mu.Lock()
				elicited = m.Result
				mu.Unlock()
				w.WriteHeader(http.StatusAccepted)
			case m.ID == nil:
				w.WriteHeader(http.StatusAccepted)
			default: // server/discover: this is a 2025 server
				w.WriteHeader(http.StatusNotFound)
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
		if c.Era() != mcp.Legacy {
			t.Fatalf("era %v", c.Era())
		}
		res, err := c.CallTool(context.Background(), "slow", nil, nil)
		if err != nil || len(res.Content) != 1 {
			t.Fatalf("the resumed call: %+v, %v", res, err)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if lastEventID != "e1" || resumedAt.Sub(closedAt) != 500*time.Millisecond {
			t.Fatalf("resumed with Last-Event-ID %q after %v; want e1 after exactly 500ms", lastEventID, resumedAt.Sub(closedAt))
		}
		if string(elicited) != `{"action":"accept","content":{}}` {
			t.Fatalf("the elicitation was answered %s", elicited)
		}
		if c.Stats().Resumptions != 1 {
			t.Fatalf("stats %+v", c.Stats())
		}
	})
}

package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// A 2025 server that forgets the session (404 with its id) gets a new
// initialize, and the request again: it never acted on it. The 404 says
// so with or without a JSON-RPC error in its body (mcprel's server
// writes one).
func TestExpiredSessionIsRenewed(t *testing.T) {
	t.Run("empty", func(t *testing.T) { testExpiredSessionIsRenewed(t, "") })
	t.Run("jsonrpc", func(t *testing.T) {
		testExpiredSessionIsRenewed(t, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32600,"message":"session not found"}}`)
	})
}

func testExpiredSessionIsRenewed(t *testing.T, body string) {
	var mu sync.Mutex
	sessions, calls := 0, 0
	current := ""
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		m := readPosted(r)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case m.Method == mcp.MethodInitialize:
			sessions++
			current = fmt.Sprint("s", sessions)
			w.Header().Set("Mcp-Session-Id", current)
			answerInitialize(w, m.ID, "forgetful")
		case m.ID == nil:
			w.WriteHeader(http.StatusAccepted)
		case r.Header.Get("Mcp-Session-Id") != current || m.Method == mcp.MethodDiscover:
			w.WriteHeader(http.StatusNotFound)
		case m.Method == mcp.MethodToolsCall:
			calls++
			if calls == 1 {
				current = "" // the server restarted: it knows no session
				if body == "" {
					w.WriteHeader(http.StatusNotFound)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprintf(w, body, m.ID)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"ok"}]}}`, m.ID)
		}
	}))
	defer hs.Close()
	c, err := client.DialHTTP(context.Background(), hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.CallTool(context.Background(), "x", nil, nil)
	if err != nil || len(res.Content) != 1 {
		t.Fatalf("the call across the expired session: %+v, %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if sessions != 2 || calls != 2 {
		t.Fatalf("%d sessions and %d calls; want a new session and the call made again", sessions, calls)
	}
	if got := c.Stats().Reconnects; got != 1 {
		t.Fatalf("Stats().Reconnects = %d after one renewed session, want 1", got)
	}
}

// A result carrying the refetch flag is noticed: OnRefetch is called and
// counted.
func TestRefetchFlagNoticed(t *testing.T) {
	refetched := make(chan struct{}, 1)
	toServer, fromClient := ioPipe()
	toClient, fromServer := ioPipe()
	f := &fakeServer{t: t, out: fromServer}
	f.handle = func(m jsonrpc.Message) {
		if m.Method == mcp.MethodToolsCall {
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"_meta":{"dev.mcprel/refetch":true},"content":[]}}`, m.ID)
		}
	}
	go f.serve(toServer)
	c, err := client.Connect(context.Background(), toClient, fromClient, &client.Options{OnRefetch: func() { refetched <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Close(); fromServer.Close() }()
	if _, err := c.CallTool(context.Background(), "x", nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-refetched:
	default:
		t.Fatal("OnRefetch was not called")
	}
	if c.Stats().Refetches != 1 {
		t.Fatalf("stats %+v", c.Stats())
	}
}

package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// A listen stream cut mid-way (2026-07-28 over HTTP): the client makes a
// new listen request — a new id, the same filter, no Last-Event-ID — and
// refetches, and notifications flow again.
func TestListenReconnectsAndRefetches(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		body        []byte
		lastEventID string
	}
	var mu sync.Mutex
	var listens []seen
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"subscriptions/listen"`)) {
			mu.Lock()
			listens = append(listens, seen{body, r.Header.Get("Last-Event-ID")})
			mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	}))
	defer hs.Close()
	c, err := client.DialHTTP(context.Background(), hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	changed := make(chan string, 16)
	refetched := make(chan struct{}, 16)
	sub, err := c.Listen(context.Background(), client.ListenOptions{
		Filter:         mcp.SubscriptionFilter{ToolsListChanged: true},
		OnNotification: func(method string, _ json.RawMessage) { changed <- method },
		Refetch: func(ctx context.Context) {
			if _, err := c.ListTools(ctx); err != nil {
				t.Errorf("refetch: %v", err)
			}
			refetched <- struct{}{}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	addTool := func(name string) {
		if err := srv.AddTool(server.Tool{Name: name}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	await := func(what string, ch <-chan string) string {
		select {
		case v := <-ch:
			return v
		case <-time.After(mcptest.Timeout):
			t.Fatalf("timed out waiting for %s", what)
		}
		return ""
	}
	addTool("first")
	if m := await("a list change", changed); m != mcp.NotificationToolsListChanged {
		t.Fatalf("got %s", m)
	}
	hs.CloseClientConnections() // the stream drops
	select {
	case <-refetched:
	case <-time.After(mcptest.Timeout):
		t.Fatal("no refetch after the stream dropped")
	}
	if got := c.Stats().Reconnects; got != 1 {
		t.Fatalf("Stats().Reconnects = %d after one stream re-established, want 1", got)
	}
	addTool("second")
	if m := await("a list change after the reconnection", changed); m != mcp.NotificationToolsListChanged {
		t.Fatalf("got %s", m)
	}
	if sub.Reconnects() < 1 {
		t.Fatalf("reconnects = %d", sub.Reconnects())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(listens) < 2 {
		t.Fatalf("%d listen requests", len(listens))
	}
	var a, b struct {
		ID     json.RawMessage
		Params struct{ Notifications json.RawMessage }
	}
	json.Unmarshal(listens[0].body, &a)
	json.Unmarshal(listens[len(listens)-1].body, &b)
	if bytes.Equal(a.ID, b.ID) || !bytes.Equal(a.Params.Notifications, b.Params.Notifications) {
		t.Fatalf("listen requests %s then %s: want a new id and the same filter", listens[0].body, listens[len(listens)-1].body)
	}
	for _, l := range listens {
		if l.lastEventID != "" {
			t.Fatalf("a 2026 listen request carried Last-Event-ID %q", l.lastEventID)
		}
	}
}

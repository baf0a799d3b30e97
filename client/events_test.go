package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// Over Streamable HTTP too, a response on the request's stream past
// Options.MaxMessageBytes is dropped unread and ends the call at once
// with a *ResponseTooLargeError, not a wait for the stream's end and a
// resumption that brings nothing.
func TestStreamableHTTPResponseTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 4096
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			m := readPosted(r)
			w.Header().Set("Mcp-Session-Id", "s1")
			switch {
			case m.Method == mcp.MethodInitialize:
				answerInitialize(w, m.ID, "big")
			case m.Method == mcp.MethodToolsCall:
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "id: e1\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"x\":%q}}\n\n", m.ID, strings.Repeat("x", 2*limit))
				w.(http.Flusher).Flush()
				<-r.Context().Done() // the stream stays open
			case m.ID == nil:
				w.WriteHeader(http.StatusAccepted)
			default:
				w.WriteHeader(http.StatusBadRequest)
			}
		})
		c, err := client.DialHTTP(context.Background(), "http://127.0.0.1/mcp", &client.Options{HTTPClient: servePipe(t, h), MaxMessageBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		_, err = c.CallTool(context.Background(), "big", nil, &client.CallOptions{Max: time.Hour})
		var tl *client.ResponseTooLargeError
		if !errors.As(err, &tl) || tl.Limit != limit {
			t.Fatalf("%v; want a ResponseTooLargeError at %d bytes", err, limit)
		}
		if took := time.Since(start); took != 0 {
			t.Fatalf("the call failed after %v; want at once", took)
		}
	})
}

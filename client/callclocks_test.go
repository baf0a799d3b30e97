package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// A tool the server added after the client's last listing is a tool the
// client has not listed: when the server refuses a call to it for a
// missing Mcp-Param header, the client lists again and sends it once
// more, with the header, as it does before any listing.
func TestParamHeadersToolAddedAfterListing(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	ok := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("ok")}}, nil
	}
	if err := srv.AddTool(server.Tool{Name: "other", InputSchema: json.RawMessage(`{"type":"object"}`)}, ok); err != nil {
		t.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &paramRecorder{}
	hs := httptest.NewServer(rec.wrap(h))
	t.Cleanup(hs.Close)
	c := dialHTTP(t, hs.URL, 0)
	if _, err := c.ListTools(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddTool(server.Tool{Name: "route", InputSchema: json.RawMessage(routeSchema)}, ok); err != nil {
		t.Fatal(err)
	}
	res, err := c.CallTool(context.Background(), "route", map[string]any{"region": "eu"}, nil)
	if err != nil || res.IsError {
		t.Fatalf("call to a tool added after the listing: %v %+v", err, res)
	}
	if got := rec.last(t); got.Get("Mcp-Param-Region") != "eu" {
		t.Fatalf("headers %v, want Region", got)
	}
}

// handlerTransport serves HTTP requests with an in-process handler, so
// that a test's server runs inside its synctest bubble.
type handlerTransport func(w http.ResponseWriter, r *http.Request)

func (h handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	h(rec, r)
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	return rec.Result(), nil
}

// The max clock bounds a tools/call whole: the call the server refused
// for a missing Mcp-Param header, the listing after it and the call sent
// again, not each of them afresh.
func TestParamHeadersResendWithinMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		serve := func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			json.NewDecoder(r.Body).Decode(&m)
			w.Header().Set("Content-Type", "application/json")
			switch m.Method {
			case mcp.MethodDiscover:
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}`, m.ID)
			case mcp.MethodToolsList:
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","tools":[{"name":"route","inputSchema":%s}]}}`, m.ID, routeSchema)
			case mcp.MethodToolsCall:
				calls++
				select { // each answer takes 4s of the call's 5s
				case <-time.After(4 * time.Second):
				case <-r.Context().Done():
					return
				}
				if calls == 1 {
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":"missing Mcp-Param-Region"}}`, m.ID, mcp.CodeHeaderMismatch)
					return
				}
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","content":[]}}`, m.ID)
			default:
				w.WriteHeader(http.StatusAccepted)
			}
		}
		c, err := client.DialHTTP(context.Background(), "http://mcp.test/", &client.Options{HTTPClient: &http.Client{Transport: handlerTransport(serve)}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		_, err = c.CallTool(context.Background(), "route", map[string]any{"region": "eu"}, &client.CallOptions{Max: 5 * time.Second, Idle: time.Minute})
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Clock != client.MaxClock || time.Since(start) != 5*time.Second {
			t.Fatalf("after %v: %v; want the max deadline at 5s", time.Since(start), err)
		}
	})
}

// The max clock ends a call whose OnRequest does not heed its context: a
// handler stuck on a person who left, or on a model that hangs, holds the
// caller no longer than a server that does not answer. The handler's
// answer, when it comes, is dropped.
func TestInputRequiredMaxHoldsAgainstAHandlerThatIgnoresCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcptest.NewServer(t, nil)
		srv.AddTool(server.Tool{Name: "ask"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			if req.RequestState == nil {
				return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": elicitName("name?")}, State: []byte("s")}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("done")}}, nil
		})
		release := make(chan struct{})
		defer close(release)
		c := dialModern(t, srv, "stdio", client.Options{OnRequest: func(context.Context, string, json.RawMessage) (any, error) {
			<-release
			return mcp.ElicitResult{Action: "accept"}, nil
		}})
		start := time.Now()
		_, err := c.CallTool(context.Background(), "ask", nil, &client.CallOptions{Idle: time.Second, Max: 10 * time.Second})
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Clock != client.MaxClock || time.Since(start) != 10*time.Second {
			t.Fatalf("after %v: %v; want the max deadline at 10s", time.Since(start), err)
		}
	})
}

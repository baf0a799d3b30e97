package client_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// Against mcprel in the 2025 era: a call's stream is cut by the network
// right after its first progress event; the call stays alive on the
// server, the client resumes the stream with Last-Event-ID after the
// server's retry delay, and reads the rest of the call there: its later
// progress and its response.
func TestResumeAgainstMcprel(t *testing.T) {
	// No rate limit on progress: every report goes out (or into the log)
	// before the response, so what was kept is all of it.
	srv := mcptest.NewServer(t, &server.Options{ProgressInterval: time.Nanosecond})
	release := make(chan struct{})
	err := srv.AddTool(server.Tool{Name: "steps"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		req.ReportProgress(1, 3, "one")
		<-release
		req.ReportProgress(2, 3, "two")
		req.ReportProgress(3, 3, "three")
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("done")}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	backend := httptest.NewServer(h)
	defer backend.Close()
	var cut atomic.Bool
	// The network: it forwards everything, streaming, except that it
	// drops the first tools/call stream after its first progress event.
	var resumed atomic.Bool
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" && resumed.CompareAndSwap(false, true) {
			// The client came back for the cut stream: only now does the
			// call go on, so the server has long seen its stream end.
			close(release)
		}
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, backend.URL, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := backend.Client().Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		dropHere := bytes.Contains(body, []byte(`"tools/call"`)) && cut.CompareAndSwap(false, true)
		rd := bufio.NewReader(resp.Body)
		for {
			line, err := rd.ReadBytes('\n')
			w.Write(line)
			w.(http.Flusher).Flush()
			if dropHere && bytes.Contains(line, []byte(`"progress":1`)) {
				w.Write([]byte("\n")) // the event's end
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			}
			if err != nil {
				return
			}
		}
	}))
	defer proxy.Close()
	c, err := client.DialHTTP(context.Background(), proxy.URL, &client.Options{Era: mcp.Legacy})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var seen []float64
	res, err := c.CallTool(context.Background(), "steps", nil, &client.CallOptions{OnProgress: func(p client.Progress) { seen = append(seen, p.Progress) }})
	if err != nil || len(res.Content) != 1 {
		t.Fatalf("the resumed call: %+v, %v", res, err)
	}
	if !cut.Load() || c.Stats().Resumptions != 1 {
		t.Fatalf("cut %v, stats %+v", cut.Load(), c.Stats())
	}
	if len(seen) < 2 || seen[0] != 1 || seen[len(seen)-1] != 3 {
		t.Fatalf("progress seen %v: want 1, then what was kept, ending at 3", seen)
	}
}

package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

// sseUpstream serves an mcprel server over the 2024-11-05 HTTP+SSE
// transport: each GET of /sse is a stream and a session (the server's
// stdio connection, its output as message events), the endpoint it names
// takes the POSTs. drop ends the streams open now, as a server restart
// would.
type sseUpstream struct {
	url string

	mu      sync.Mutex
	inputs  map[string]io.WriteCloser
	drops   []chan struct{}
	streams int
}

func newSSEUpstream(t *testing.T, srv *server.Server) *sseUpstream {
	u := &sseUpstream{inputs: map[string]io.WriteCloser{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", func(w http.ResponseWriter, r *http.Request) {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		conn := stdio.NewConn(srv, inR, outW, nil)
		go func() { conn.Serve(context.Background()); outW.Close() }()
		drop := make(chan struct{})
		u.mu.Lock()
		u.streams++
		id := fmt.Sprint(u.streams)
		u.inputs[id] = inW
		u.drops = append(u.drops, drop)
		u.mu.Unlock()
		defer inW.Close() // the stream's end ends the session
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: endpoint\ndata: /message?sid=%s\n\n", id)
		w.(http.Flusher).Flush()
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(outR)
			sc.Buffer(nil, 8<<20)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					return
				}
				fmt.Fprintf(w, "event: message\ndata: %s\n\n", line)
				w.(http.Flusher).Flush()
			case <-drop:
				return
			case <-r.Context().Done():
				return
			}
		}
	})
	mux.HandleFunc("POST /message", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		in := u.inputs[r.URL.Query().Get("sid")]
		u.mu.Unlock()
		if in == nil {
			http.Error(w, "no such session", http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		in.Write(append([]byte(strings.TrimSpace(string(body))), '\n'))
		w.WriteHeader(http.StatusAccepted)
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	u.url = hs.URL + "/sse"
	return u
}

// drop ends every stream open now.
func (u *sseUpstream) drop() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, d := range u.drops {
		close(d)
	}
	u.drops = nil
}

// An HTTP+SSE upstream whose stream ends (its session with it) is
// connected again, with a new stream and session, listed again, and
// served; the gateway counts it as a death and a reconnection.
func TestSSEUpstreamReconnects(t *testing.T) {
	up := newUpstream(t) // the tools; served here over HTTP+SSE
	sse := newSSEUpstream(t, up.srv)
	ev := newEvents()
	f := newFront(t, gateway.Options{
		Upstreams:   []gateway.Upstream{{Name: "old", URL: sse.url, Transport: gateway.SSE}},
		Observer:    ev,
		RestartBase: time.Millisecond, RestartCap: 10 * time.Millisecond,
	}, nil)
	c := f.dial(t, 0, nil)
	res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "first"}, nil)
	if err != nil || !strings.Contains(structured(res), "first") {
		t.Fatalf("echo over HTTP+SSE: %+v, %v", res, err)
	}
	sse.drop()
	ev.waitFor(t, gateway.EventDied)
	ev.waitFor(t, gateway.EventReconnected)
	ev.waitFor(t, gateway.EventListed)
	res, err = c.CallTool(context.Background(), "echo", map[string]any{"text": "again"}, nil)
	if err != nil || !strings.Contains(structured(res), "again") {
		t.Fatalf("echo after the stream ended: %+v, %v", res, err)
	}
	if st := f.gw.Upstreams()[0]; st.Restarts != 1 || !st.Connected {
		t.Fatalf("upstream state %+v, want connected after one reconnection", st)
	}
	sse.mu.Lock()
	defer sse.mu.Unlock()
	if sse.streams != 2 {
		t.Fatalf("%d streams opened, want 2", sse.streams)
	}
}

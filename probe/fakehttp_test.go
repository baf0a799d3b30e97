package probe_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// httpFake is a small Streamable HTTP MCP server of the test's own,
// written from the spec alone like the stdio fake, and broken as its
// fields say. At zero it speaks both eras, answers with JSON, lists no
// tools and refuses the 2025 era's GET stream (405).
type httpFake struct {
	// versions is what server/discover lists (both eras when nil).
	versions []string
	// refusesModern: a 2026-07-28 request other than server/discover is
	// refused with -32022 (HTTP 400), as a stateful 2025 server does.
	refusesModern bool
	// noLegacy: initialize is refused.
	noLegacy bool
	// listen is how subscriptions/listen is answered:
	//	""          a JSON result {} at once
	//	"stream"    an SSE stream: the acknowledgement first, then held open (keepalive comments every keepalive, when set)
	//	"ack-close" an SSE stream: the acknowledgement, then closed
	listen    string
	keepalive time.Duration
	// crashOn: a tools/call of this tool stops the server, once every
	// quiet stream it holds is open: it takes no more connections.
	crashOn string
	// tools are what tools/list lists (each takes any arguments and
	// answers at once, but slow).
	tools []string
	// slow is listed too: a call of it reports progress every 20 ms on
	// its SSE stream until the stream is closed, and is never answered —
	// a POSTed cancellation does nothing to it.
	slow bool

	srv     *httptest.Server
	mu      sync.Mutex
	holding int           // quiet streams open
	held    chan struct{} // closed when one is
}

func (f *httpFake) start(t *testing.T) string {
	f.held = make(chan struct{})
	f.srv = httptest.NewServer(f)
	t.Cleanup(func() {
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f.srv.URL + "/mcp"
}

func (f *httpFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "no GET stream here", http.StatusMethodNotAllowed)
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
			Meta struct {
				Token json.RawMessage `json:"progressToken"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&m) != nil {
		http.Error(w, "bad JSON", http.StatusBadRequest)
		return
	}
	if m.ID == nil {
		w.WriteHeader(http.StatusAccepted) // a notification
		return
	}
	modern := r.Header.Get("MCP-Protocol-Version") == "2026-07-28"
	answer := func(status int, v map[string]any) {
		v["jsonrpc"], v["id"] = "2.0", m.ID
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	result := func(v map[string]any) { answer(http.StatusOK, map[string]any{"result": v}) }
	switch {
	case m.Method == "initialize":
		if f.noLegacy {
			answer(http.StatusBadRequest, map[string]any{"error": map[string]any{"code": -32602, "message": "unsupported protocol version"}})
			return
		}
		w.Header().Set("Mcp-Session-Id", "fake-session")
		result(map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tools": map[string]any{}},
			"serverInfo": map[string]any{"name": "fake", "version": "0"}})
		return
	case m.Method == "server/discover":
		versions := f.versions
		if versions == nil {
			versions = []string{"2026-07-28", "2025-11-25"}
		}
		result(map[string]any{"supportedVersions": versions, "capabilities": map[string]any{"tools": map[string]any{}},
			"resultType": "complete", "ttlMs": 0, "cacheScope": "public"})
		return
	case modern && f.refusesModern:
		answer(http.StatusBadRequest, map[string]any{"error": map[string]any{"code": -32022,
			"message": `protocol version "2026-07-28" is not supported by this server`}})
		return
	}
	switch m.Method {
	case "ping":
		result(map[string]any{})
	case "tools/list":
		var tools []map[string]any
		for _, name := range append(f.tools, map[bool]string{true: "slow"}[f.slow]) {
			if name == "" {
				continue
			}
			tools = append(tools, map[string]any{"name": name, "inputSchema": map[string]any{"type": "object"}})
		}
		result(map[string]any{"tools": tools, "resultType": "complete"})
	case "tools/call":
		if m.Params.Name == "slow" && f.slow {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.Header().Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for i := 1; ; i++ {
				fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":%s,\"progress\":%d}}\n\n", m.Params.Meta.Token, i)
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
				}
			}
		}
		if m.Params.Name == f.crashOn && slices.Contains(f.tools, f.crashOn) {
			f.crash()
			panic(http.ErrAbortHandler)
		}
		result(map[string]any{"content": []map[string]any{{"type": "text", "text": "done"}}})
	case "subscriptions/listen":
		f.serveListen(w, r, m.ID)
	default:
		answer(http.StatusOK, map[string]any{"error": map[string]any{"code": -32601, "message": "no such method: " + m.Method}})
	}
}

func (f *httpFake) serveListen(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
	if f.listen == "" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`+"\n", id)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{\"notifications\":{\"toolsListChanged\":true},\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":%s}}}\n\n", id)
	w.(http.Flusher).Flush()
	if f.listen == "ack-close" {
		return
	}
	f.mu.Lock()
	if f.holding++; f.holding == 1 {
		close(f.held)
	}
	f.mu.Unlock()
	var tick <-chan time.Time
	if f.keepalive > 0 {
		t := time.NewTicker(f.keepalive)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick:
			io.WriteString(w, ": keepalive\n\n")
			w.(http.Flusher).Flush()
		}
	}
}

// crash stops the server as a process that died would: once a quiet
// stream is open (so that a fixture watching one sees it cut), no new
// connection is taken and every open one is cut.
func (f *httpFake) crash() {
	select {
	case <-f.held:
	case <-time.After(10 * time.Second): // no fixture holds one: crash all the same
	}
	f.srv.Listener.Close()
	go f.srv.CloseClientConnections()
}

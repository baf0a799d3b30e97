package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// hugeUpstream is a hand-written 2026-07-28 server over HTTP whose tool
// "huge" answers with a 50 MB result, written in two halves: it signals
// half once the first 25 MB are on the wire, and writes the rest when
// release is closed. Its "echo" answers at once.
type hugeUpstream struct {
	url           string
	half, release chan struct{}
}

const hugeHalf = 25 << 20

func newHugeUpstream(t *testing.T) *hugeUpstream {
	u := &hugeUpstream{half: make(chan struct{}, 1), release: make(chan struct{})}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m, derr := jsonrpc.Decode(body)
		if derr != nil || m.Kind != jsonrpc.KindRequest {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		answer := func(result string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.AppendJSON(nil), result)
		}
		var p struct{ Name string }
		json.Unmarshal(m.Params, &p)
		switch {
		case m.Method == mcp.MethodDiscover:
			answer(`{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}`)
		case m.Method == mcp.MethodToolsList:
			answer(`{"resultType":"complete","tools":[{"name":"huge","inputSchema":{"type":"object"}},{"name":"echo","inputSchema":{"type":"object"}}]}`)
		case m.Method == mcp.MethodToolsCall && p.Name == "echo":
			answer(`{"resultType":"complete","content":[{"type":"text","text":"echoed"}]}`)
		case m.Method == mcp.MethodToolsCall && p.Name == "huge":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, `data: {"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","content":[{"type":"text","text":"`, m.ID.AppendJSON(nil))
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			for range hugeHalf / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			w.(http.Flusher).Flush()
			u.half <- struct{}{}
			select {
			case <-u.release:
			case <-r.Context().Done():
				return
			}
			for range hugeHalf / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			io.WriteString(w, "\"}]}}\n\n")
		default:
			answer(`{"resultType":"complete"}`)
		}
	}))
	t.Cleanup(hs.Close)
	u.url = hs.URL
	return u
}

// An upstream that answers with 50 MB: the gateway never holds it (its
// client drops it past its message limit while it streams), another
// tenant's call is served meanwhile, and the caller gets a failure that
// says the answer was too large and the call may have taken effect.
func TestHugeAnswerIsNeverHeld(t *testing.T) {
	u := newHugeUpstream(t)
	f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}}},
		&streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
	alice := f.dial(t, 0, &client.Options{Header: http.Header{"Authorization": {"Bearer tok-a"}}})
	bob := f.dial(t, 0, &client.Options{Header: http.Header{"Authorization": {"Bearer tok-b"}}})

	before := liveHeap()
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := alice.CallTool(context.Background(), "huge", nil, &client.CallOptions{Max: wait})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case <-u.half:
	case <-time.After(wait):
		t.Fatal("the upstream never wrote the first half")
	}
	held := liveHeap() - before
	t.Logf("25 MB into a 50 MB answer, the live heap grew by %.1f MiB", float64(held)/(1<<20))
	if held > 12<<20 {
		t.Errorf("the live heap grew by %d bytes with 25 MB of one answer read: the gateway holds it", held)
	}
	res, err := bob.CallTool(context.Background(), "echo", nil, nil)
	if err != nil || text(res) != "echoed" {
		t.Fatalf("another tenant's call during the huge answer: %+v, %v", res, err)
	}
	close(u.release)
	var fail mcp.Failure
	select {
	case res := <-done:
		fail = failureOf(t, res)
	case <-time.After(wait):
		t.Fatal("the huge call never ended")
	}
	if fail.Code != mcp.FailureOutcomeUnknown || fail.Retryable || !strings.Contains(fail.Message, "more than the gateway takes in") {
		t.Fatalf("the huge answer gave %+v, want a non-retryable outcome_unknown saying it was too large", fail)
	}
}

// An upstream tool that never answers ends at the gateway's deadline,
// cancelled upstream, while another tenant's calls are served.
func TestSilentUpstreamEndsAtTheDeadline(t *testing.T) {
	u := newUpstream(t)
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}},
		Policy:    &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"hang": {Server: server.Policy{IdleTimeout: 100 * time.Millisecond, MaxTimeout: time.Minute}}}},
	}, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
	alice := f.dial(t, 0, &client.Options{Header: http.Header{"Authorization": {"Bearer tok-a"}}})
	bob := f.dial(t, 0, &client.Options{Header: http.Header{"Authorization": {"Bearer tok-b"}}})
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := alice.CallTool(context.Background(), "hang", nil, &client.CallOptions{Max: wait})
		done <- res
	}()
	u.gate.WaitEntered(t)
	res, err := bob.CallTool(context.Background(), "echo", map[string]any{"text": "bob"}, nil)
	if err != nil || !strings.Contains(structured(res), "bob") {
		t.Fatalf("another tenant during a silent call: %+v, %v", res, err)
	}
	if fail := failureOf(t, <-done); fail.Code != mcp.FailureTimeout {
		t.Fatalf("the silent call: %+v", fail)
	}
	if cause := u.gate.WaitExited(t); !upstreamCancelled(mcp.Modern, cause) {
		t.Fatalf("the silent handler ended with %v, want its client's cancellation", cause)
	}
	u.gate.Release()
}

// liveHeap is the heap in use once garbage is collected.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

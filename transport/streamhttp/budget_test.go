package streamhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// Large calls that wait for a slot are bounded in bytes, in total: past
// Options.MaxInflightBytes they are refused with the retryable overload
// (429 over HTTP), and the process's live heap while the admitted ones wait
// stays under the budget plus a constant: each queued call holds its
// request once.
func TestQueuedCallsBoundedInBytes(t *testing.T) {
	const (
		budget = 4 << 20
		pad    = 256 << 10
		calls  = 24
		slack  = 2 << 20 // the test's own buffers, the HTTP machinery, the GC's own
		// The safety net on each wait: under the race detector, decoding
		// these requests takes seconds.
		wait = time.Minute
	)
	srv := mcptest.NewServer(t, &server.Options{MaxConcurrentCalls: 2, MaxInflightBytes: budget})
	gate := mcptest.NewGate(t, srv, "gate")
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A connection turns idle when its request's handler has returned:
	// only then has a refused request let go of its bytes.
	idle := make(chan struct{}, calls)
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateIdle {
			idle <- struct{}{}
		}
	}
	ts.Start()
	t.Cleanup(func() { gate.Release(); h.Shutdown(context.Background()); ts.Close() })
	c := struct {
		URL    string
		Client *http.Client
	}{ts.URL, ts.Client()}

	// One body for every request, so the clients hold one copy of it.
	params, _ := json.Marshal(mcptest.ModernParams(map[string]any{"name": "gate", "arguments": map[string]any{"pad": strings.Repeat("x", pad)}}))
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": mcp.MethodToolsCall, "params": json.RawMessage(params)})
	admitted := budget / len(params)

	liveHeap() // pools filled by earlier tests are emptied
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, calls)
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, c.URL, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range mcptest.ModernHeaders(mcp.MethodToolsCall, "gate") {
				req.Header.Set(k, v)
			}
			resp, err := c.Client.Do(req)
			if err != nil {
				answers <- answer{body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{resp.StatusCode, string(b)}
		})
	}
	// Every call past the budget is refused at once; the admitted ones
	// wait, two of them in the gate.
	refused := 0
	timeout := time.After(wait)
	for refused < calls-admitted {
		select {
		case a := <-answers:
			if a.status != http.StatusTooManyRequests || !strings.Contains(a.body, `"code":-31001`) {
				t.Fatalf("a call past the budget got %d %.200s, want 429 with -31001", a.status, a.body)
			}
			refused++
		case <-timeout:
			t.Fatalf("only %d of %d calls past the budget were refused", refused, calls-admitted)
		}
	}
	for range refused {
		select {
		case <-idle:
		case <-timeout:
			t.Fatal("the refused requests' handlers never returned")
		}
	}
	gate.WaitEntered(t)
	gate.WaitEntered(t)
	for l := srv.Load(); l.Running+l.Queued < admitted; l = srv.Load() {
		select {
		case <-timeout:
			t.Fatalf("only %+v of %d admitted calls reached the queue", l, admitted)
		default:
			runtime.Gosched() // the last admitted calls are being decoded
		}
	}
	if l := srv.Load(); l.Bytes > budget || l.Bytes < int64(admitted*len(params)) {
		t.Fatalf("the server counts %d bytes held by %d calls of %d bytes", l.Bytes, admitted, len(params))
	}

	held := liveHeap() - int64(before.HeapAlloc)
	t.Logf("%d calls admitted of %d; live heap grew by %.2f MiB with them waiting (budget %d MiB)", admitted, calls, float64(held)/(1<<20), budget>>20)
	if held > budget+slack {
		t.Errorf("the live heap grew by %d bytes while %d calls of %d bytes waited: more than the %d-byte budget plus %d", held, admitted, len(params), budget, slack)
	}

	gate.Release()
	wg.Wait()
	close(answers)
	ok := 0
	for a := range answers {
		if a.status == http.StatusOK {
			ok++
		}
	}
	if ok != admitted {
		t.Fatalf("%d admitted calls completed, want %d", ok, admitted)
	}
}

// liveHeap is the heap in use once garbage is collected, sync.Pool caches
// included: two collections empty a pool's victim cache as well.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

package main

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpCollector accepts OTLP/HTTP trace exports and keeps their spans by
// name.
type otlpCollector struct {
	mu    sync.Mutex
	spans map[string][][]byte // name → [trace id, parent span id]
}

func (c *otlpCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans[s.GetName()] = [][]byte{s.GetTraceId(), s.GetParentSpanId()}
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Write(out)
}

// serve --otlp-endpoint exports a span per request to an OTLP collector,
// continuing the trace the client sent in params._meta, and flushes what
// it buffered when it is stopped.
func TestServeExportsTraces(t *testing.T) {
	col := &otlpCollector{spans: map[string][][]byte{}}
	hs := httptest.NewServer(col)
	defer hs.Close()
	url, cmd, _ := startHTTPAt(t, "127.0.0.1:0", nil, "--otlp-endpoint", hs.URL)
	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	call := strings.Replace(modernCall(1, "echo", `{"text":"traced"}`), `"_meta":{`,
		`"_meta":{"traceparent":"00-`+traceID+`-`+parent+`-01",`, 1)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(call))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "echo")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "traced") {
		t.Fatalf("call: %d %s", resp.StatusCode, b)
	}
	// Stopped, the server flushes its spans before it exits.
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v", err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	span, ok := col.spans["tools/call echo"]
	if !ok {
		t.Fatalf("the collector got no span for the call; it got %v", col.spans)
	}
	if got := hex.EncodeToString(span[0]); got != traceID {
		t.Errorf("trace id %s, want the client's %s", got, traceID)
	}
	if got := hex.EncodeToString(span[1]); got != parent {
		t.Errorf("parent span %s, want the client's %s", got, parent)
	}
}

package main

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/otlptest"
)

// serve --otlp-endpoint exports a span per request to an OTLP collector,
// continuing the trace the client sent in params._meta, and flushes what
// it buffered when it is stopped.
func TestServeExportsTraces(t *testing.T) {
	col := otlptest.Start(t)
	url, cmd, rest := startHTTPAt(t, "127.0.0.1:0", nil, "--otlp-endpoint", col.URL)
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
	// Its request line names the trace (read before the process is
	// stopped, while its stderr is still open).
	for found := false; !found; {
		select {
		case line := <-rest:
			if found = strings.Contains(line, "msg=request") && strings.Contains(line, "tool=echo"); found && !strings.Contains(line, "trace_id="+traceID) {
				t.Errorf("the request line %q does not name trace %s", line, traceID)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no request line for the call")
		}
	}
	// Stopped, the server flushes its spans before it exits.
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v", err)
	}
	spans := col.Named("tools/call echo")
	if len(spans) != 1 {
		t.Fatalf("the collector got %d spans for the call; it got %v", len(spans), col.Spans())
	}
	if s := spans[0]; s.TraceID != traceID || s.ParentSpanID != parent || s.Attributes["network.transport"] != "tcp" {
		t.Errorf("span %+v: want trace %s under the client's span %s, over tcp", s, traceID, parent)
	}
}

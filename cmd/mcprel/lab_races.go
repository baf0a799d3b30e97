package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// raceCancelFirst is scenario A: a call is running, the client cancels
// it, and only then does the handler complete. The cancellation won: the
// server writes nothing more for the request, and discards the result.
func raceCancelFirst(p *labProcess) (Record, error) {
	r := Record{Section: "lab", Name: "A: cancel, then complete (stdio)"}
	if err := p.call("A1", "lab_hold", `{"gate":"A"}`, "A"); err != nil {
		return r, err
	}
	if _, err := p.waitProgress("A"); err != nil { // the handler runs
		return r, err
	}
	if err := p.cancel("A1", "the user gave up"); err != nil {
		return r, err
	}
	// The handler completes now that the cancellation is in: lab_release
	// answers once it has returned.
	if err := p.call("A2", "lab_release", `{"gate":"A"}`, ""); err != nil {
		return r, err
	}
	frames, err := p.until("A2")
	if err != nil {
		return r, err
	}
	if err := p.call("A3", "echo", `{"text":"after A"}`, ""); err != nil {
		return r, err
	}
	after, err := p.until("A3")
	if err != nil {
		return r, err
	}
	response, _ := framesFor(append(frames, after...), "A1", "")
	line, err := p.logs.requestLine("A1")
	if err != nil {
		return r, err
	}
	discarded, err := p.logs.find(map[string]string{"msg": "handler returned after the request ended; result discarded", "id": "A1"})
	if err != nil {
		return r, err
	}
	r.add("order", "notifications/cancelled reached the server, then the handler returned a result")
	r.add("terminal state", outcomeOf(line))
	r.add("final response", response != nil)
	r.add("cancellation on the wire", `notifications/cancelled {"requestId":"A1"} (client → server; nothing answers a notification)`)
	overrun, _ := discarded["overrun"].(float64) // slog writes a duration in nanoseconds
	r.add("handler's late result", fmt.Sprintf("discarded by the server (it returned %v after the request ended)", time.Duration(overrun).Round(time.Microsecond)))
	r.add("client must ignore", "any response for A1: none came, and one that did would be for a call it gave up")
	return r, nil
}

// raceCompleteFirst is scenario B: the call completes, and the client's
// cancellation arrives after the response. The response stands; the late
// cancellation is ignored.
func raceCompleteFirst(p *labProcess) (Record, error) {
	r := Record{Section: "lab", Name: "B: complete, then cancel (stdio)"}
	if err := p.call("B1", "lab_hold", `{"gate":"B"}`, "B"); err != nil {
		return r, err
	}
	if _, err := p.waitProgress("B"); err != nil {
		return r, err
	}
	if err := p.call("B2", "lab_release", `{"gate":"B"}`, ""); err != nil {
		return r, err
	}
	frames, err := p.until("B2")
	if err != nil {
		return r, err
	}
	for resp, _ := framesFor(frames, "B1", ""); resp == nil; resp, _ = framesFor(frames, "B1", "") {
		f, err := p.next()
		if err != nil {
			return r, err
		}
		frames = append(frames, f)
	}
	if err := p.cancel("B1", "too late"); err != nil {
		return r, err
	}
	if err := p.call("B3", "echo", `{"text":"after B"}`, ""); err != nil {
		return r, err
	}
	after, err := p.until("B3")
	if err != nil {
		return r, err
	}
	line, err := p.logs.requestLine("B1")
	if err != nil {
		return r, err
	}
	r.add("order", "the handler returned and the response was written, then notifications/cancelled arrived")
	r.add("terminal state", outcomeOf(line))
	response, _ := framesFor(frames, "B1", "")
	r.add("final response", response != nil)
	r.add("cancellation on the wire", `notifications/cancelled {"requestId":"B1"}, after the response`)
	r.add("frames after the late cancellation", len(after)-1) // besides B3's own answer
	r.add("client must ignore", "its own late cancellation: the result it already has stands")
	return r, nil
}

// raceDeadlines is scenario C: progress arrives before every idle
// deadline, which keeps resetting, and the maximum deadline fires anyway.
func raceDeadlines(p *labProcess) (Record, error) {
	r := Record{Section: "lab", Name: "C: progress before each idle deadline, then past the maximum (stdio)"}
	start := time.Now()
	if err := p.call("C1", "lab_tick", `{"everyMs":50}`, "C"); err != nil {
		return r, err
	}
	frames, err := p.until("C1")
	if err != nil {
		return r, err
	}
	response, progress := framesFor(frames, "C1", "C")
	gap, last := time.Duration(0), start
	for _, f := range frames {
		if f.Method == "notifications/progress" {
			gap, last = max(gap, f.at.Sub(last)), f.at
		}
	}
	line, err := p.logs.requestLine("C1")
	if err != nil {
		return r, err
	}
	r.add("idle deadline", labTickIdle.String())
	r.add("maximum deadline", labTickMax.String())
	r.add("progress reports received", progress)
	r.add("longest wait for progress", gap.Round(time.Millisecond).String())
	r.add("terminal state", outcomeOf(line))
	r.add("final response", response != nil)
	if response != nil {
		var res mcp.CallToolResult
		json.Unmarshal(response.Result, &res)
		failure, _ := res.Meta[mcp.MetaFailure].(map[string]any)
		r.add("response", fmt.Sprintf("isError=%v, code %v", res.IsError, failure["code"]))
	}
	r.add("cancellation on the wire", "none from the client: the server's maximum deadline ended the call, and the server answered it")
	r.add("client must ignore", "progress after the final response (none is sent)")
	return r, nil
}

// raceStdioDisconnect is scenario D over stdio: the client gives up on a
// call during its progress. On stdio that is a notification.
func raceStdioDisconnect(p *labProcess) (Record, error) {
	r := Record{Section: "lab", Name: "D: giving up during progress (stdio)"}
	if err := p.call("D1", "lab_hold", `{"gate":"D-stdio"}`, "D"); err != nil {
		return r, err
	}
	if _, err := p.waitProgress("D"); err != nil {
		return r, err
	}
	if err := p.cancel("D1", "the client disconnected"); err != nil {
		return r, err
	}
	line, err := p.logs.requestLine("D1")
	if err != nil {
		return r, err
	}
	if err := p.call("D2", "lab_release", `{"gate":"D-stdio"}`, ""); err != nil {
		return r, err
	}
	frames, err := p.until("D2")
	if err != nil {
		return r, err
	}
	response, _ := framesFor(frames, "D1", "")
	r.add("terminal state", outcomeOf(line))
	r.add("final response", response != nil)
	r.add("cancellation on the wire", `notifications/cancelled {"requestId":"D1"}: the pipe stays open for other requests`)
	r.add("client must ignore", "late progress or a result for D1 (none came)")
	return r, nil
}

// waitProgress reads frames until a progress notification under token.
func (p *labProcess) waitProgress(token string) (labFrame, error) {
	for {
		f, err := p.next()
		if err != nil {
			return f, err
		}
		if f.Method == "notifications/progress" && strings.Contains(string(f.Params), fmt.Sprintf(`"progressToken":%q`, token)) {
			return f, nil
		}
	}
}

// httpLab is "mcprel serve --http --lab" as a child process.
type httpLab struct {
	cmd  *exec.Cmd
	url  string
	logs *logLines
}

// startHTTPLab starts an HTTP lab server on db, on a free loopback port,
// with extra flags and env added to its environment.
func startHTTPLab(ctx context.Context, self, db string, env []string, extra ...string) (*httpLab, error) {
	cmd := exec.CommandContext(ctx, self, append([]string{"serve", "--http", "127.0.0.1:0", "--lab", "--db", db, "--log-format", "json"}, extra...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	br := bufio.NewReader(stderr)
	first, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "http://") {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("demo: the HTTP server announced %q", first)
	}
	h := &httpLab{cmd: cmd, url: strings.TrimSpace(first), logs: newLogLines()}
	go h.logs.read(br)
	return h, nil
}

func (h *httpLab) stop() {
	h.cmd.Process.Signal(syscall.SIGTERM)
	h.logs.wait() // its log to the end, before Wait closes the pipe
	h.cmd.Wait()
}

// post sends one modern-era request and returns the response.
func (h *httpLab) post(ctx context.Context, id, tool, args, token string) (*http.Response, error) {
	extra := ""
	if token != "" {
		extra = fmt.Sprintf(`,"progressToken":%q`, token)
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"tools/call","params":{"name":%q,"arguments":%s,%s}}`, id, tool, args, modernMeta(extra))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version20260728)
	req.Header.Set(mcp.HeaderMethod, "tools/call")
	req.Header.Set(mcp.HeaderName, tool)
	return http.DefaultClient.Do(req)
}

// raceHTTPDisconnect is scenario D over Streamable HTTP (2026-07-28): the
// client gives up during progress by closing the request's response
// stream. No cancellation is POSTed: the closed stream is the signal. It
// also records the stream's headers, for the SSE section.
func raceHTTPDisconnect(ctx context.Context, h *httpLab) (Record, http.Header, error) {
	r := Record{Section: "lab", Name: "D: giving up during progress (Streamable HTTP, 2026-07-28)"}
	resp, err := h.post(ctx, "D1", "lab_hold", `{"gate":"D-http"}`, "D")
	if err != nil {
		return r, nil, err
	}
	// Read the stream up to the first progress event, then close it.
	sc := bufio.NewScanner(resp.Body)
	sawProgress := false
	for !sawProgress && sc.Scan() {
		sawProgress = strings.HasPrefix(sc.Text(), "data:") && strings.Contains(sc.Text(), "notifications/progress")
	}
	resp.Body.Close()
	if !sawProgress {
		return r, nil, fmt.Errorf("demo: the stream ended before any progress (status %d)", resp.StatusCode)
	}
	line, err := h.logs.requestLine("D1")
	if err != nil {
		return r, nil, err
	}
	release, err := h.post(ctx, "D2", "lab_release", `{"gate":"D-http"}`, "")
	if err != nil {
		return r, nil, err
	}
	io.Copy(io.Discard, release.Body)
	release.Body.Close()
	r.add("terminal state", outcomeOf(line))
	r.add("final response", false)
	r.add("cancellation on the wire", "the request's response stream closed by the client; no notifications/cancelled POST (2026-07-28 has none)")
	r.add("client must ignore", "nothing can arrive: the stream that would carry D1's result is gone")
	return r, resp.Header, nil
}

// sseRecord describes the event stream's headers and keepalive policy.
func sseRecord(h http.Header) Record {
	r := Record{Section: "streams", Name: "SSE headers and keepalive policy (Streamable HTTP)"}
	for _, k := range []string{"Content-Type", "Cache-Control", "X-Accel-Buffering"} {
		r.add(k, h.Get(k))
	}
	r.add("keepalive", fmt.Sprintf("a comment line every %v on a quiet stream (serve --keepalive); it resets no deadline and is not progress", streamhttp.DefaultKeepAlive))
	r.add("progress", fmt.Sprintf("at most one report per %v per request, coalesced: a newer value replaces an unsent one", server.DefaultProgressInterval))
	return r
}

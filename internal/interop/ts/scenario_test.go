package ts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/interop/scenario"
)

// TestTypeScriptScenario runs the interop scenario with both official
// TypeScript SDKs in every era and transport they speak against `mcprel
// serve`, and judges each answer with the judge every client faces: each
// result or tool failure must reach the caller as the server meant it,
// never as a client-side validation error.
func TestTypeScriptScenario(t *testing.T) {
	requireNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := buildServer(t, ctx)
	for _, tc := range []struct{ sdk, era string }{
		{"v1", "legacy"}, // @modelcontextprotocol/sdk 1.32.2
		{"v2", "legacy"}, // @modelcontextprotocol/client 2.4.0, its default handshake
		{"v2", "modern"}, // the same, pinned to 2026-07-28
	} {
		for _, transport := range []string{"stdio", "http"} {
			t.Run(fmt.Sprintf("%s-%s-%s", tc.sdk, tc.era, transport), func(t *testing.T) {
				var target string
				var serverLog func(done func([]map[string]string) bool) []map[string]string
				if transport == "stdio" {
					// The client spawns the server; its log goes to a file.
					dir := t.TempDir()
					logPath := filepath.Join(dir, "server.log")
					target = fmt.Sprintf("exec %q serve --stdio --db %q --log-format json 2>>%q", bin, filepath.Join(dir, "ledger.db"), logPath)
					serverLog = func(done func([]map[string]string) bool) []map[string]string { return awaitFile(t, logPath, done) }
				} else {
					srv := startHTTPServer(t, ctx, bin)
					target = srv.url
					serverLog = func(done func([]map[string]string) bool) []map[string]string {
						if !srv.waitFor(ctx, done) {
							t.Fatal("the server's log never showed the aborted call cancelled and its handler stopped")
						}
						srv.mu.Lock()
						defer srv.mu.Unlock()
						return slices.Clone(srv.log)
					}
				}
				cmd := exec.CommandContext(ctx, "node", "scenario-client.mjs", tc.sdk, tc.era, transport, target)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				cmd.Env = append(os.Environ(), nodeEnv...)
				cmd.WaitDelay = 10 * time.Second
				if err := cmd.Run(); err != nil {
					t.Fatalf("node scenario-client.mjs: %v\n%s\n%s", err, stdout.Bytes(), stderr.Bytes())
				}
				wantCause := "cancelled by the client"
				if tc.era == "modern" && transport == "http" {
					wantCause = "client closed the request stream"
				}
				judgeTS(t, tc.era, wantCause, stdout.Bytes(), serverLog)
			})
		}
	}
}

type tsOutcome struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Name, Message string
		Code          any
	} `json:"error"`
}

// judgeTS judges one run of scenario-client.mjs; serverLog returns the
// server's log once done holds for it, where the cancelled call must have
// ended with wantCause.
func judgeTS(t *testing.T, era, wantCause string, raw []byte, serverLog func(done func([]map[string]string) bool) []map[string]string) {
	t.Helper()
	var out struct {
		ProtocolVersion string
		Tools           []string
		Steps           []struct {
			Name string
			tsOutcome
		}
		Progress struct {
			tsOutcome
			Values, Late []float64
		}
		Cancel struct {
			tsOutcome
			ProgressBeforeAbort bool
		}
		AfterCancel  tsOutcome
		ClientErrors []string
		Fatal        string
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("the client's report %s: %v", raw, err)
	}
	if out.Fatal != "" {
		t.Fatalf("the client failed: %s", out.Fatal)
	}
	s := scenario.Load()
	if want := map[string]string{"legacy": "2025-11-25", "modern": "2026-07-28"}[era]; out.ProtocolVersion != want && !strings.HasPrefix(out.ProtocolVersion, "(") {
		t.Errorf("negotiated %q, want %s", out.ProtocolVersion, want)
	}
	slices.Sort(out.Tools)
	if !slices.Equal(out.Tools, s.Tools) {
		t.Errorf("tools/list = %v, want %v", out.Tools, s.Tools)
	}
	run := &scenario.Run{}
	judge := func(step scenario.Step, o tsOutcome) {
		t.Helper()
		if o.Error != nil {
			t.Errorf("%s: the client threw %s (code %v): %s", step.Name, o.Error.Name, o.Error.Code, o.Error.Message)
		} else if p := run.Judge(step, o.Result); p != "" {
			t.Errorf("%s: %s\n%s", step.Name, p, o.Result)
		}
	}
	if len(out.Steps) != len(s.Steps) {
		t.Fatalf("the client ran %d steps of %d", len(out.Steps), len(s.Steps))
	}
	for i, step := range s.Steps {
		judge(step, out.Steps[i].tsOutcome)
	}
	judge(s.Progress, out.Progress.tsOutcome)
	// typescript-sdk#2580: the last value may be reported as late.
	values := append(out.Progress.Values, out.Progress.Late...)
	if len(values) == 0 || values[len(values)-1] != s.Progress.LastProgress || !slices.IsSorted(values) || len(slices.Compact(slices.Clone(values))) != len(values) {
		t.Errorf("progress %v (+%v late), want increasing values ending at %v", out.Progress.Values, out.Progress.Late, s.Progress.LastProgress)
	}
	if !out.Cancel.ProgressBeforeAbort || out.Cancel.Error == nil || !strings.Contains(out.Cancel.Error.Message, "AbortError") {
		t.Errorf("the aborted call: %+v, want an abort error after progress", out.Cancel)
	}
	judge(s.Steps[0], out.AfterCancel)
	if len(out.ClientErrors) > 0 {
		t.Errorf("the client reported errors: %v", out.ClientErrors)
	}

	// The server's side of the cancellation: the call ended cancelled by
	// the client's signal, its handler stopped, and nothing was logged
	// above INFO.
	isCancelled := func(rec map[string]string) bool {
		return rec["msg"] == "request" && rec["tool"] == s.Cancel.Tool && rec["outcome"] == "cancelled"
	}
	log := serverLog(func(log []map[string]string) bool {
		i := slices.IndexFunc(log, isCancelled)
		return i >= 0 && slices.ContainsFunc(log, func(rec map[string]string) bool {
			return rec["msg"] == "handler returned after the request ended; result discarded" && rec["id"] == log[i]["id"]
		})
	})
	if rec := log[slices.IndexFunc(log, isCancelled)]; !strings.HasPrefix(rec["cause"], wantCause) {
		t.Errorf("the aborted call was cancelled with cause %q, want %q", rec["cause"], wantCause)
	}
	for _, rec := range log {
		if rec["level"] != "INFO" && rec["level"] != "DEBUG" {
			t.Errorf("the server logged %s", rec)
		}
	}
	if t.Failed() {
		t.Logf("client report: %s", raw)
	}
}

// awaitFile reads the JSON log a stdio server writes to path until done
// says it holds what the test needs. The server has usually exited by the
// time its client is done; until then the file is read again as it grows.
func awaitFile(t *testing.T, path string, done func([]map[string]string) bool) []map[string]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a safety net, never an outcome
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var log []map[string]string
		for line := range strings.Lines(string(data)) {
			if rec := parseLogLine(strings.TrimSpace(line)); rec != nil {
				log = append(log, rec)
			}
		}
		if done(log) {
			return log
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's log never showed the aborted call cancelled and its handler stopped:\n%s", data)
		}
		time.Sleep(10 * time.Millisecond) // polling a file another process writes
	}
}

package status_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/status"
)

var now = time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)

type upstreams []status.Upstream

func (u upstreams) Upstreams(context.Context) ([]status.Upstream, error) { return u, nil }

type unknowns struct {
	list  []status.Unknown
	total int
	err   error
}

func (u unknowns) Unknown(_ context.Context, limit int) ([]status.Unknown, int, error) {
	return u.list[:min(limit, len(u.list))], u.total, u.err
}

type taskCounts struct {
	c   status.TaskCounts
	err error
}

func (t taskCounts) TaskCounts(context.Context) (status.TaskCounts, error) { return t.c, t.err }

// blocked is a source that answers only when its context ends.
type blocked struct{}

func (blocked) OutboxCounts(ctx context.Context) (status.OutboxCounts, error) {
	<-ctx.Done()
	return status.OutboxCounts{}, ctx.Err()
}

type tenants struct {
	loads  []status.TenantLoad
	limits status.Limits
}

func (t tenants) Tenants(_ context.Context, limit int) ([]status.TenantLoad, int, status.Limits, error) {
	return t.loads[:min(limit, len(t.loads))], len(t.loads), t.limits, nil
}

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

// hostile is a name made to break out of the HTML it is written into.
const hostile = `<script>alert("x")</script>`

// The page shows every section, escapes what its sources name, and
// reloads itself; the JSON carries the same data.
func TestPageRendersAndEscapes(t *testing.T) {
	errAt := now.Add(-time.Minute)
	p := status.New(&status.Options{
		Replica: "gw-1:42", Implementation: "mcprel-gateway", Version: "1.2.3", Started: now.Add(-time.Hour),
		Now: func() time.Time { return now },
		Upstreams: upstreams{
			{Name: "files", Transport: "stdio", Era: "legacy", State: "connected", Circuit: "closed",
				Latency: status.Latency{Samples: 3, P50Ms: 12, P90Ms: 30, MaxMs: 31, LastMs: 5}},
			{Name: "pay", Transport: "http", State: "down", Circuit: "open", Restarts: 4,
				LastError: "dial tcp: connection refused " + hostile, LastErrorAt: &errAt},
		},
		Unknown: unknowns{total: 1, list: []status.Unknown{{Tenant: hostile, Tool: "send_" + hostile, Key: "k'1",
			At: now.Add(-90 * time.Second), Reason: "lost", ReconcileWith: "list_sent",
			Resolve: "mcprel ledger resolve --tool x --key 'k'\\''1'"}}},
		Tasks: taskCounts{c: status.TaskCounts{ByStatus: map[string]int{"working": 2, "completed": 10000},
			AtLeast: []string{"completed"}, OldestWorking: now.Add(-3 * time.Minute)}},
		Tenants: tenants{loads: []status.TenantLoad{{Tenant: hostile, Running: 2}}, limits: status.Limits{MaxConcurrent: 4}},
	})
	res, body := get(t, p.HTML(), "/status")
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("%d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if strings.Contains(body, "<script") {
		t.Errorf("a hostile name reached the page unescaped:\n%s", body)
	}
	if !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("no policy: %v", res.Header)
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="5">`, "gw-1:42", "mcprel-gateway 1.2.3", "up 1h00m",
		"files", "pay", ">down<", ">open<", "p50 12.0 ms", "&lt;script&gt;",
		"list_sent", "1m30s", "mcprel ledger resolve --tool x --key &#39;k&#39;\\&#39;&#39;1&#39;",
		"10000+", "3m00s old", "concurrent calls 4",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(body, "more (list them") {
		t.Errorf("the page says there are more unknown outcomes than it lists")
	}

	res, body = get(t, p.JSON(), "/status.json")
	if res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("type %s", res.Header.Get("Content-Type"))
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"replica", "implementation", "version", "started_at", "uptime_seconds", "generated_at",
		"upstreams", "unknown_outcomes", "tasks", "outbox", "tenants"} {
		if _, ok := got[key]; !ok {
			t.Errorf("the JSON lacks %q: %s", key, body)
		}
	}
	var snap status.Snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Replica != "gw-1:42" || snap.Outbox != nil || len(snap.Upstreams.Upstreams) != 2 ||
		snap.Unknown.Outcomes[0].Tool != "send_"+hostile || snap.Unknown.Outcomes[0].AgeSeconds != 90 ||
		*snap.Tasks.OldestWorkingAgeSeconds != 180 || snap.Tenants.Tenants[0].Running != 2 {
		t.Errorf("snapshot %s", body)
	}
}

// With 10,000 unknown outcomes the page lists MaxUnknown of them and says
// how many more there are, in a page of bounded size; so do the tenants.
func TestPageIsBounded(t *testing.T) {
	var list []status.Unknown
	var loads []status.TenantLoad
	for i := range 10_000 {
		list = append(list, status.Unknown{Tenant: "t", Tool: "tool", Key: fmt.Sprintf("%0255d", i), At: now,
			Reason: strings.Repeat("r", 10_000), Resolve: "mcprel ledger resolve"})
		loads = append(loads, status.TenantLoad{Tenant: fmt.Sprint("tenant-", i), Running: 1})
	}
	// A source that ignores the limit is held to it still.
	p := status.New(&status.Options{Now: func() time.Time { return now },
		Unknown: greedy{list}, Tenants: tenants{loads: loads}})
	_, body := get(t, p.HTML(), "/status")
	if n := strings.Count(body, "mcprel ledger resolve"); n != status.MaxUnknown {
		t.Errorf("%d unknown outcomes listed, want %d", n, status.MaxUnknown)
	}
	if !strings.Contains(body, "… and 9950 more") || !strings.Contains(body, "… and 9950 more tenant(s)") {
		t.Errorf("the page does not say how many more")
	}
	if len(body) > 200_000 {
		t.Errorf("the page is %d bytes", len(body))
	}
	_, body = get(t, p.JSON(), "/status.json")
	var snap status.Snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Unknown.Outcomes) != 50 || snap.Unknown.More != 9950 || snap.Unknown.Total != 10_000 ||
		len(snap.Unknown.Outcomes[0].Reason) > status.MaxText+len("…") || len(body) > 250_000 {
		t.Errorf("JSON: %d outcomes, %d more of %d, %d bytes", len(snap.Unknown.Outcomes), snap.Unknown.More, snap.Unknown.Total, len(body))
	}
}

type greedy struct{ list []status.Unknown }

func (g greedy) Unknown(context.Context, int) ([]status.Unknown, int, error) {
	return g.list, len(g.list), nil
}

// A source that fails or does not answer in time shows as unavailable,
// with a generic message: its error goes to the log, never to the page.
func TestFailingSourceIsUnavailable(t *testing.T) {
	var log bytes.Buffer
	secret := errors.New(`pq: password authentication failed for user "admin" at db.internal:5432`)
	p := status.New(&status.Options{Now: func() time.Time { return now }, Timeout: 20 * time.Millisecond,
		Logger:  slog.New(slog.NewTextHandler(&log, nil)),
		Unknown: unknowns{err: secret}, Tasks: taskCounts{err: secret}, Outbox: blocked{},
		Upstreams: upstreams{}})
	for _, h := range []http.Handler{p.HTML(), p.JSON()} {
		res, body := get(t, h, "/")
		if res.StatusCode != 200 || strings.Contains(body, "password") || strings.Contains(body, "db.internal") {
			t.Errorf("%d %s", res.StatusCode, body)
		}
		if strings.Count(body, status.Unavailable) != 3 {
			t.Errorf("not three sections unavailable: %s", body)
		}
	}
	if !strings.Contains(log.String(), "password authentication failed") || !strings.Contains(log.String(), "did not answer in time") {
		t.Errorf("log: %s", log.String())
	}
}

// Only GET and HEAD are served.
func TestReadOnly(t *testing.T) {
	p := status.New(nil)
	rec := httptest.NewRecorder()
	p.JSON().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/status.json", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
}

// Redact takes credentials out of URLs and headers, and the secrets it is
// told of out of anything.
func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`Post "https://user:pw@api.example.com/mcp?token=s3cret&x=1#frag": dial tcp: refused`,
			`Post "https://api.example.com/mcp": dial tcp: refused`},
		{`GET http://h:8080/p?access_token=abc failed`, `GET http://h:8080/p failed`},
		{`401: Authorization: Bearer eyJhbGciOi.xyz rejected`, `401: Authorization: Bearer [redacted] rejected`},
		{`the key sk-live-12345 was refused`, `the key [redacted] was refused`},
		{`exit status 1`, `exit status 1`},
	} {
		if got := status.Redact(tc.in, []string{"sk-live-12345", "pw"}); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

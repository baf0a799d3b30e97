package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The lab's records, as "mcprel demo" makes them (runLab is what the
// command runs), each asserted: the outcomes the runtime promises, in an
// order the gates forced.
func TestDemoRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	records, err := runLab(ctx, binary, filepath.Join(t.TempDir(), "lab.db"))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Record{}
	for _, r := range records {
		byName[r.Section+": "+r.Name] = r
	}
	want := func(name, key string, value any) {
		t.Helper()
		r, ok := byName[name]
		if !ok {
			t.Errorf("no record %q", name)
			return
		}
		if got := r.Get(key); fmt.Sprint(got) != fmt.Sprint(value) {
			t.Errorf("%s: %s = %v, want %v", name, key, got, value)
		}
	}
	prefix := func(name, key, value string) {
		t.Helper()
		if got := fmt.Sprint(byName[name].Get(key)); !strings.HasPrefix(got, value) {
			t.Errorf("%s: %s = %q, want it to start with %q", name, key, got, value)
		}
	}

	a := "lab: A: cancel, then complete (stdio)"
	prefix(a, "terminal state", "cancelled (cancelled by the client")
	want(a, "final response", false)
	prefix(a, "handler's late result", "discarded by the server")

	b := "lab: B: complete, then cancel (stdio)"
	want(b, "terminal state", "completed")
	want(b, "final response", true)
	want(b, "frames after the late cancellation", 0)

	c := "lab: C: progress before each idle deadline, then past the maximum (stdio)"
	want(c, "terminal state", "timed_out (maximum deadline exceeded)")
	want(c, "final response", true)
	want(c, "response", "isError=true, code timeout")
	if n, _ := byName[c].Get("progress reports received").(int); n < 3 {
		t.Errorf("C: %d progress reports: the idle deadline (200ms) would have fired first without them", n)
	}
	if gap, err := time.ParseDuration(fmt.Sprint(byName[c].Get("longest wait for progress"))); err != nil || gap >= labTickIdle {
		t.Errorf("C: longest wait for progress %v, %v: want under the idle deadline", gap, err)
	}

	d := "lab: D: giving up during progress (stdio)"
	prefix(d, "terminal state", "cancelled (cancelled by the client")
	want(d, "final response", false)
	prefix(d, "cancellation on the wire", "notifications/cancelled")
	dh := "lab: D: giving up during progress (Streamable HTTP, 2026-07-28)"
	want(dh, "terminal state", "cancelled (client closed the request stream)")
	prefix(dh, "cancellation on the wire", "the request's response stream closed")

	want("ledger: a mutation without a key, sent twice under two JSON-RPC ids", "executions", 2)
	k := "ledger: the same mutation with an idempotency key, sent twice"
	want(k, "executions", 1)
	want(k, "second replayed", true)
	q := "ledger: a key reused with a changed quantity"
	want(q, "reuse (quantity 4)", "refused: idempotency_conflict")
	want(q, "stock after both", 7)
	race := "ledger: two connections racing one key at a barrier"
	want(race, "executions (ledger)", 1)
	want(race, "same reservation", true)
	want(race, "stock after", 5)
	if got := fmt.Sprint(byName[race].Get("replayed")); got != "[true false]" && got != "[false true]" {
		t.Errorf("race: replayed %s, want one execution and one replay", got)
	}
	m := "ledger: a returned result mutated by its caller, then replayed"
	want(m, "replay equals the first result", true)
	prefix(m, "replay", "quantity 3, reservationId res_")
	re := "ledger: the file closed, reopened by a new server, reconciled by key"
	want(re, "state", "committed")
	want(re, "executions", 1)
	want(re, "stored result equals the first", true)

	task := "task: a durable task cancelled: intent acknowledged, observed at a checkpoint"
	prefix(task, "created", "status working")
	want(task, "tasks/get after the acknowledgement", "working")
	want(task, "tasks/get after the checkpoint", "cancelled")

	o := "overload: a bounded buffer under a client that stops reading"
	want(o, "final response present", true)
	want(o, "refetch flag", true)
	if n, _ := byName[o].Get("reports delivered").(int); n < 1 || n >= 500 {
		t.Errorf("overload: %d of 500 reports delivered: want some, not all", n)
	}

	s := "streams: SSE headers and keepalive policy (Streamable HTTP)"
	want(s, "Content-Type", "text/event-stream")
	prefix(s, "Cache-Control", "no-cache")
	want(s, "X-Accel-Buffering", "no")
	rc := "streams: the reconnect plan (Streamable HTTP, 2026-07-28)"
	want(rc, "backoff bounds of the first 6 reconnections", "250ms, 500ms, 1s, 2s, 4s, 8s")
	want(rc, "reconnections", 1)
	want(rc, "Last-Event-ID sent", false)
	if ids, _ := byName[rc].Get("listen requests (ids)").([]string); len(ids) != 2 || ids[0] == ids[1] {
		t.Errorf("reconnect: listen request ids %v, want two, the second new", ids)
	}
	prefix(rc, "refetched", "tools/list after the new stream was acknowledged")
	ob := "outbox: the server SIGKILLed between the commit and the delivery, then restarted"
	prefix(ob, "demo-alice's call answered", "accepted, operation op_")
	want(ob, "demo-alice after the restart", "delivered on attempt 2; paid once")
	want(ob, "demo-bob after the restart", "delivered on attempt 2; paid once")
	want(ob, "a retry with demo-bob's key", "replayed true, the same operation: true")
	want(ob, "provider", "3 deliveries reached it, 2 payouts made, 1 answered from its key")
	want(ob, "one delivery key per payout", true)
	if len(records) != 16 {
		t.Errorf("%d records, want 16", len(records))
	}
}

// "mcprel demo --json" writes the same records as JSON evidence.
func TestDemoJSON(t *testing.T) {
	out, err := exec.Command(binary, "demo", "--json").Output()
	if err != nil {
		t.Fatalf("mcprel demo --json: %v\n%s", err, out)
	}
	var records []struct {
		Section string         `json:"section"`
		Name    string         `json:"name"`
		Facts   map[string]any `json:"facts"`
	}
	if err := json.Unmarshal(out, &records); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(records) != 16 || records[0].Section != "lab" || records[0].Facts["final response"] != false {
		t.Fatalf("records: %+v", records)
	}
}

// When the server the demo starts cannot run, the demo says why, in the
// server's own words, rather than only that it went away.
func TestDemoSaysWhyTheServerExited(t *testing.T) {
	cmd := exec.Command(binary, "demo", "--db", filepath.Join(t.TempDir(), "missing", "x.db"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("mcprel demo with a database in a missing directory: %v, want exit 1\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "the server exited: store: cannot open the SQLite file") || !strings.Contains(stderr.String(), "does not exist") {
		t.Errorf("the demo's error does not give the cause:\n%s", stderr.String())
	}
}

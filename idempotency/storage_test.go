package idempotency_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
)

// A database that is busy or locked (another process holds SQLite's write
// lock past the busy timeout) is a retryable failure, never tool_error, and
// the driver's text stays in the server's log.
func TestBusySQLiteIsRetryable(t *testing.T) {
	ctx := context.Background()
	path := storetest.SQLite(t)
	l := ledgertest.Open(t, path, &store.Options{BusyTimeout: 20 * time.Millisecond}, nil,
		"busy-test", store.Migration{Version: 1, SQL: `CREATE TABLE notes (n TEXT NOT NULL)`})
	db := l.DB()
	var logs mcptest.LogBuffer
	srv := mcptest.NewServer(t, &server.Options{Logger: logs.Logger()})
	write := func(ctx context.Context, tx *store.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO notes (n) VALUES ('x')`)
		return err
	}
	err := srv.AddTool(server.Tool{Name: "keyed"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, write(ctx, idempotency.Tx(call))
	}, idempotency.Keyed(l, idempotency.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	err = srv.AddTool(server.Tool{Name: "plain"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, db.WriteTx(ctx, func(tx *store.Tx) error { return write(ctx, tx) })
	})
	if err != nil {
		t.Fatal(err)
	}

	// Another process's writer: a connection of its own holding the lock.
	other, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	hold, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.ExecContext(ctx, `INSERT INTO notes (n) VALUES ('held')`); err != nil {
		t.Fatal(err)
	}

	c := mcptest.Stdio(t, srv, nil)
	for i, tc := range []struct{ tool, code string }{{"keyed", mcp.FailureLedger}, {"plain", mcp.FailureStorage}} {
		f := c.Call(int64(i+1), mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": tc.tool, "arguments": map[string]any{"idempotencyKey": "k-1"}}))
		got := mcptest.Failure(t, f.Result)
		if got.Code != tc.code || !got.Retryable || got.RetryAfterMs <= 0 {
			t.Errorf("%s with the database locked: %+v, want retryable %s", tc.tool, got, tc.code)
		}
		if strings.Contains(strings.ToLower(f.Raw), "sqlite") || strings.Contains(f.Raw, "locked") {
			t.Errorf("%s: the driver's text reached the client: %s", tc.tool, f.Raw)
		}
	}
	if !strings.Contains(logs.String(), "SQLITE_BUSY") {
		t.Errorf("the server log lacks the driver's error:\n%s", logs.String())
	}

	// Once the lock is gone the same key runs, once.
	hold.Rollback()
	f := c.Call(10, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "keyed", "arguments": map[string]any{"idempotencyKey": "k-1"}}))
	if !strings.Contains(f.Raw, `"dev.mcprel/replayed":false`) {
		t.Fatalf("retry after the lock was released: %s", f.Raw)
	}
}

// A PostgreSQL backend terminated while a keyed call waits on a row lock
// (pg_terminate_backend: an administrator, a failover) is ledger_unavailable,
// retryable; nothing committed, and a retry with the same key runs once.
func TestTerminatedBackendIsRetryable(t *testing.T) {
	ctx := context.Background()
	dsn := storetest.Postgres(t)
	app := fmt.Sprintf("mcprel-victim-%d", os.Getpid())
	l := ledgertest.Open(t, storetest.Tagged(dsn, app), nil, nil, "terminate-test", store.Migration{Version: 1,
		SQL: `CREATE TABLE stock (id INTEGER PRIMARY KEY, n INTEGER NOT NULL); INSERT INTO stock (id, n) VALUES (1, 10)`})
	var logs mcptest.LogBuffer
	srv := mcptest.NewServer(t, &server.Options{Logger: logs.Logger()})
	var runs atomic.Int64
	err := srv.AddTool(server.Tool{Name: "take"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		var n int
		if err := idempotency.Tx(req).QueryRow(ctx, `SELECT n FROM stock WHERE id = 1 FOR UPDATE`).Scan(&n); err != nil {
			return nil, err
		}
		_, err := idempotency.Tx(req).Exec(ctx, `UPDATE stock SET n = n - 1 WHERE id = 1`)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(fmt.Sprint(n - 1))}}, err
	}, idempotency.Keyed(l, idempotency.Policy{}))
	if err != nil {
		t.Fatal(err)
	}

	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	lock, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(ctx, `SELECT n FROM stock WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	c := mcptest.Stdio(t, srv, nil)
	params := mcptest.ModernParams(map[string]any{"name": "take", "arguments": map[string]any{"idempotencyKey": "k-1"}})
	c.Request(1, mcp.MethodToolsCall, params)
	// The call's backend waits on the row lock: terminate it.
	deadline := time.Now().Add(mcptest.Timeout)
	for {
		var pid int
		err := admin.QueryRowContext(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&pid)
		if err == nil {
			if _, err := admin.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call never waited on the row lock")
		}
		time.Sleep(5 * time.Millisecond) // polling another process's state
	}
	f, _ := c.Await(1)
	got := mcptest.Failure(t, f.Result)
	if got.Code != mcp.FailureLedger || !got.Retryable || got.RetryAfterMs <= 0 {
		t.Fatalf("a terminated backend: %+v, want retryable %s", got, mcp.FailureLedger)
	}
	if strings.Contains(f.Raw, "SQLSTATE") || strings.Contains(f.Raw, "terminating") {
		t.Fatalf("the driver's text reached the client: %s", f.Raw)
	}
	if !strings.Contains(logs.String(), "57P01") {
		t.Errorf("the server log lacks the driver's error:\n%s", logs.String())
	}

	lock.Rollback()
	retry := c.Call(2, mcp.MethodToolsCall, params)
	var res struct {
		Meta    map[string]any `json:"_meta"`
		Content []struct{ Text string }
	}
	if json.Unmarshal(retry.Result, &res) != nil || res.Meta[mcp.MetaReplayed] != false || len(res.Content) == 0 || res.Content[0].Text != "9" {
		t.Fatalf("retry after the termination: %s, want it to run once", retry.Raw)
	}
	if again := c.Call(3, mcp.MethodToolsCall, params); !strings.Contains(again.Raw, `"dev.mcprel/replayed":true`) {
		t.Fatalf("a second retry: %s, want a replay", again.Raw)
	}
	var n int
	if err := admin.QueryRowContext(ctx, `SELECT n FROM stock WHERE id = 1`).Scan(&n); err != nil || n != 9 {
		t.Fatalf("stock %d (%v), want 9: one effect", n, err)
	}
}

// A receiver's answer that the store refuses to take, for a call forwarded
// at most once, leaves the key's outcome unknown: no retry can be given
// that answer, and the key is never run again. So the call's own client
// is told outcome_unknown too, not the success every later retry
// contradicts. The store is made to fail the completion by a lock another
// connection holds past the ledger's wait for it: SQLite's write lock, or
// PostgreSQL's lock on the record's row.
func TestAnAnswerTheStoreRefusesIsUnknownToEveryone(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		ledgerDSN := dsn
		if strings.HasPrefix(dsn, "postgres") {
			ledgerDSN += "&lock_timeout=50ms" // the ledger's connections give up on a held row lock
		}
		clk := newClock()
		l := ledgertest.Open(t, ledgerDSN, &store.Options{BusyTimeout: 50 * time.Millisecond}, &ledger.Options{Lease: time.Hour, Now: clk.Now}, "")
		var logs mcptest.LogBuffer
		srv := mcptest.NewServer(t, &server.Options{Logger: logs.Logger()})
		entered, answer := make(chan struct{}), make(chan struct{})
		var runs atomic.Int64
		err := srv.AddTool(server.Tool{Name: "send", Policy: server.Policy{MaxTimeout: time.Hour}}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			if runs.Add(1) == 1 {
				close(entered)
				<-answer
			}
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("sent")}}, nil
		}, idempotency.Keyed(l, idempotency.Policy{External: true, AtMostOnce: true, KeyArgument: "requestId"}))
		if err != nil {
			t.Fatal(err)
		}
		c := mcptest.Stdio(t, srv, nil)
		c.Request(1, mcp.MethodToolsCall, sendParams("u-1", nil))
		<-entered

		// Another connection holds what the completion needs.
		var other *sql.DB
		if strings.HasPrefix(dsn, "postgres") {
			other, err = sql.Open("pgx", dsn)
		} else {
			other, err = sql.Open("sqlite", "file:"+dsn+"?_txlock=immediate")
		}
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		hold, err := other.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Rollback()
		if _, err := hold.ExecContext(ctx, `UPDATE mcprel_ledger SET executions = executions WHERE idem_key = 'u-1'`); err != nil {
			t.Fatal(err)
		}

		close(answer)
		f, _ := c.Await(1)
		first := result(t, f)
		if !first.IsError {
			t.Fatalf("the call whose answer could not be stored got %s; every retry will be told outcome_unknown", first.raw)
		}
		if got := first.failure(t); got.Code != mcp.FailureOutcomeUnknown || got.Retryable || got.Details["reason"] != "the answer could not be stored" {
			t.Fatalf("the call whose answer could not be stored got %+v, want outcome_unknown", got)
		}
		if !strings.Contains(logs.String(), "could not be stored") {
			t.Errorf("the server log does not say the answer could not be stored:\n%s", logs.String())
		}

		// The lock goes; the claim's lease runs out: every retry is told
		// the same, and nothing runs again.
		if err := hold.Rollback(); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Hour)
		for id := int64(2); id <= 3; id++ {
			if got := result(t, c.Call(id, mcp.MethodToolsCall, sendParams("u-1", nil))).failure(t); got.Code != mcp.FailureOutcomeUnknown || got.Retryable {
				t.Fatalf("retry %d = %+v, want outcome_unknown", id, got)
			}
		}
		if runs.Load() != 1 {
			t.Fatalf("%d runs, want 1", runs.Load())
		}
	})
}

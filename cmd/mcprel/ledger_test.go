package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
)

func modernCall(id int, tool, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s,`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, id, tool, args)
}

// TestLedgerShow: what a server committed is there for "mcprel ledger
// show" after the server exits; an unknown key exits 3.
func TestLedgerShow(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	c := startServe(t, "--db", db)
	// One at a time: calls run concurrently, and the reservation needs
	// the stock to exist.
	for i, call := range []string{
		modernCall(1, "set_stock", `{"sku":"s","quantity":5,"expectedVersion":0}`),
		modernCall(2, "reserve_inventory", `{"sku":"s","quantity":2,"idempotencyKey":"k-1"}`),
	} {
		c.send(call)
		if l, _ := c.next(); !strings.Contains(l, fmt.Sprintf(`"id":%d,"result"`, i+1)) || strings.Contains(l, `"isError":true`) {
			t.Fatalf("call failed: %s", l)
		}
	}
	c.in.Close()
	if code := c.wait(); code != 0 {
		t.Fatalf("serve exited %d: %s", code, c.stderr)
	}

	out, err := exec.Command(binary, "ledger", "show", "--db", db, "--tool", "reserve_inventory", "--key", "k-1").Output()
	if err != nil {
		t.Fatalf("ledger show: %v", err)
	}
	var rec struct {
		Found      bool
		State      string
		Executions int
		Result     struct{ StructuredContent struct{ Remaining int } }
	}
	if err := json.Unmarshal(out, &rec); err != nil || !rec.Found || rec.State != "committed" || rec.Executions != 1 || rec.Result.StructuredContent.Remaining != 3 {
		t.Fatalf("ledger show printed %s (%v)", out, err)
	}
	cmd := exec.Command(binary, "ledger", "show", "--db", db, "--tool", "reserve_inventory", "--key", "never")
	if out, _ := cmd.Output(); cmd.ProcessState.ExitCode() != 3 || !strings.Contains(string(out), `"found":false`) {
		t.Fatalf("ledger show of an unknown key: exit %d, %s", cmd.ProcessState.ExitCode(), out)
	}
	// A mistyped path is an error, not "never committed", and creates nothing.
	typo := filepath.Join(filepath.Dir(db), "ledgr.db")
	cmd = exec.Command(binary, "ledger", "show", "--db", typo, "--tool", "reserve_inventory", "--key", "k-1")
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "no such file") {
		t.Fatalf("ledger show of a missing file: exit %d, %s", cmd.ProcessState.ExitCode(), out)
	}
	if _, err := os.Stat(typo); err == nil {
		t.Fatal("ledger show created the mistyped database")
	}
	if err := exec.Command(binary, "ledger", "show", "--db", db).Run(); err == nil {
		t.Fatal("ledger show without --tool and --key succeeded")
	}
}

// The ledger's tenant is the caller's authenticated tenant: an operation
// made with alice's token is found with "ledger show --tenant alice", and
// nowhere else — while the server that made it is still running.
func TestLedgerShowTenant(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	url, _ := startHTTP(t, nil, "--db", db, "--token", "alice=tok-a")
	alice := httpReplica{url: url, token: "tok-a"}
	for i, call := range [][2]string{
		{"set_stock", `{"sku":"s","quantity":5,"expectedVersion":0}`},
		{"reserve_inventory", `{"sku":"s","quantity":2,"idempotencyKey":"k-1"}`},
	} {
		if out, err := alice.call(t, i+1, call[0], call[1]); err != nil || out.IsError {
			t.Fatalf("%s: %+v, %v", call[0], out, err)
		}
	}
	show := func(tenant string) int {
		cmd := exec.Command(binary, "ledger", "show", "--db", db, "--tenant", tenant, "--tool", "reserve_inventory", "--key", "k-1")
		out, _ := cmd.CombinedOutput()
		if tenant == "alice" && !strings.Contains(string(out), `"executions": 1`) {
			t.Errorf("ledger show --tenant alice printed %s", out)
		}
		return cmd.ProcessState.ExitCode()
	}
	if code := show("alice"); code != 0 {
		t.Errorf("ledger show --tenant alice exited %d", code)
	}
	if code := show(""); code != 3 {
		t.Errorf("ledger show without the tenant exited %d, want 3 (not found)", code)
	}
}

// The --auth-token holder is a tenant of its own (""), not an operator over
// the others: it neither sees nor changes a tenant's stock or operations,
// and its own are recorded under "".
func TestAuthTokenIsATenantOfItsOwn(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	url, _ := startHTTP(t, nil, "--db", db, "--token", "alice=tok-a", "--auth-token", "tok-admin")
	alice := httpReplica{url: url, token: "tok-a"}
	admin := httpReplica{url: url, token: "tok-admin"}
	mustCall := func(r httpReplica, id int, tool, args string) toolOutcome {
		t.Helper()
		out, err := r.call(t, id, tool, args)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return out
	}
	if out := mustCall(alice, 1, "set_stock", `{"sku":"w","quantity":5,"expectedVersion":0}`); out.IsError {
		t.Fatalf("alice's set_stock: %+v", out)
	}
	if out := mustCall(alice, 2, "reserve_inventory", `{"sku":"w","quantity":2,"idempotencyKey":"k-alice"}`); out.IsError {
		t.Fatalf("alice's reservation: %+v", out)
	}
	// The admin token sees no stock of alice's and cannot reserve it.
	if out := mustCall(admin, 3, "get_inventory", `{"sku":"w"}`); !out.IsError {
		t.Errorf("the admin token read alice's stock: %+v", out)
	}
	if out := mustCall(admin, 4, "reserve_inventory", `{"sku":"w","quantity":1,"idempotencyKey":"k-admin"}`); !out.IsError {
		t.Errorf("the admin token reserved alice's stock: %+v", out)
	}
	if out := mustCall(admin, 5, "lookup_operation", `{"tool":"reserve_inventory","idempotencyKey":"k-alice"}`); out.StructuredContent["found"] != false {
		t.Errorf("the admin token found alice's operation: %+v", out)
	}
	// Its own stock and operations live under tenant "".
	mustCall(admin, 6, "set_stock", `{"sku":"w","quantity":9,"expectedVersion":0}`)
	if out := mustCall(admin, 7, "reserve_inventory", `{"sku":"w","quantity":1,"idempotencyKey":"k-admin-2"}`); out.IsError || out.StructuredContent["remaining"] != float64(8) {
		t.Errorf("the admin token's own reservation: %+v", out)
	}
	if out := mustCall(alice, 8, "get_inventory", `{"sku":"w"}`); out.StructuredContent["available"] != float64(3) {
		t.Errorf("alice's stock after the admin's calls: %+v", out)
	}
	cmd := exec.Command(binary, "ledger", "show", "--db", db, "--tool", "reserve_inventory", "--key", "k-admin-2")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("ledger show of the admin's operation under tenant \"\": %v\n%s", err, out)
	}
}

// httpReplica is one "mcprel serve --http" process.
type httpReplica struct{ url, token string }

func startReplica(t *testing.T, dsn string) httpReplica {
	t.Helper()
	// MCPREL_DB keeps the URL out of the process list.
	url, _ := startHTTP(t, []string{"MCPREL_DB=" + dsn}, "--max-concurrent", "64")
	return httpReplica{url: url}
}

type toolOutcome struct {
	IsError           bool
	StructuredContent map[string]any
	Meta              map[string]any `json:"_meta"`
}

func (r httpReplica) call(t *testing.T, id int, tool, args string) (toolOutcome, error) {
	req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader(modernCall(id, tool, args)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return toolOutcome{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return toolOutcome{}, err
	}
	var msg struct {
		Result *toolOutcome
		Error  json.RawMessage
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Result == nil {
		return toolOutcome{}, fmt.Errorf("response %d %s", resp.StatusCode, body)
	}
	return *msg.Result, nil
}

// Two replicas sharing one PostgreSQL database: concurrent calls with the
// same key, spread over both, execute once.
func TestReplicasShareLedger(t *testing.T) {
	dsn := storetest.Postgres(t)
	replicas := []httpReplica{startReplica(t, dsn), startReplica(t, dsn)}
	if out, err := replicas[0].call(t, 1, "set_stock", `{"sku":"widget","quantity":1000,"expectedVersion":0}`); err != nil || out.IsError {
		t.Fatalf("set_stock: %+v, %v", out, err)
	}
	const keys, callsPerKey = 10, 6
	type result struct {
		key string
		out toolOutcome
		err error
	}
	results := make(chan result, keys*callsPerKey)
	barrier := make(chan struct{})
	var wg sync.WaitGroup
	for k := range keys {
		for i := range callsPerKey {
			r := replicas[i%2] // alternate replicas for every key
			wg.Go(func() {
				key := fmt.Sprintf("order-%d", k)
				<-barrier
				out, err := r.call(t, 100+k*callsPerKey+i, "reserve_inventory", fmt.Sprintf(`{"sku":"widget","quantity":%d,"idempotencyKey":%q}`, k+1, key))
				results <- result{key, out, err}
			})
		}
	}
	close(barrier)
	wg.Wait()
	close(results)
	executed := map[string]int{}
	reservation := map[string]any{}
	for r := range results {
		if r.err != nil || r.out.IsError {
			t.Fatalf("%s: %+v, %v", r.key, r.out, r.err)
		}
		if r.out.Meta[mcp.MetaReplayed] == false {
			executed[r.key]++
		}
		id := r.out.StructuredContent["reservationId"]
		if prev, ok := reservation[r.key]; ok && prev != id {
			t.Fatalf("%s answered with two reservations: %v and %v", r.key, prev, id)
		}
		reservation[r.key] = id
	}
	for k := range keys {
		if n := executed[fmt.Sprintf("order-%d", k)]; n != 1 {
			t.Errorf("order-%d executed %d times", k, n)
		}
	}
	// The database agrees: one reservation row per key, and the stock
	// went down by the sum of the quantities once.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, available int
	ctx := context.Background()
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM demo_reservations`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT available FROM demo_inventory WHERE tenant = '' AND sku = 'widget'`).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if rows != keys || available != 1000-keys*(keys+1)/2 {
		t.Fatalf("%d reservation rows and %d available; want %d and %d", rows, available, keys, 1000-keys*(keys+1)/2)
	}
}

// With tokens, serve limits each tenant on its own: alice's slow calls fill
// her share (one running, one queued, any more refused with 429), and
// bob's call is served beside them.
func TestTenantsAreLimitedApart(t *testing.T) {
	url, _ := startHTTP(t, nil, "--token", "alice=tok-a", "--token", "bob=tok-b", "--max-concurrent", "4", "--max-queued", "4")
	post := func(ctx context.Context, token, tool, args string, progress bool) (*http.Response, error) {
		body := modernCall(1, tool, args)
		if progress {
			body = strings.Replace(body, `"_meta":{`, `"_meta":{"progressToken":"p",`, 1)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", tool)
		req.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultClient.Do(req)
	}
	// alice's calls end with the test, which cancels them.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := `{"steps":1000,"intervalMs":200}`
	// The first runs: its first progress says so.
	first, err := post(ctx, "tok-a", "slow_count", slow, true)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	if line, err := bufio.NewReader(first.Body).ReadString('\n'); err != nil || first.StatusCode != http.StatusOK {
		t.Fatalf("alice's first call: %d %q %v", first.StatusCode, line, err)
	}
	// Of two more, one waits in alice's one-call queue and the other is
	// refused, whichever comes second.
	statuses := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := post(ctx, "tok-a", "slow_count", slow, false)
			if err != nil {
				statuses <- 0
				return
			}
			statuses <- resp.StatusCode
			resp.Body.Close()
		}()
	}
	select {
	case status := <-statuses:
		if status != http.StatusTooManyRequests {
			t.Fatalf("alice's call past her share: %d, want 429", status)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("alice's calls past her share were never refused")
	}
	resp, err := post(context.Background(), "tok-b", "echo", `{"text":"bob"}`, false)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "bob") {
		t.Fatalf("bob's echo beside alice's full share: %d %s", resp.StatusCode, body)
	}
}

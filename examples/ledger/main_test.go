package main

import (
	"bufio"
	"database/sql"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/readmetest"

	_ "modernc.org/sqlite"
)

// TestReadmeShowsThisFile keeps the README's ledger example compiling:
// the README must quote main.go verbatim.
func TestReadmeShowsThisFile(t *testing.T) {
	readmetest.QuotesFile(t, "main.go")
}

// TestRetryReservesOnce runs the example: two calls with one key reserve
// once, and the second says it was replayed.
func TestRetryReservesOnce(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "ledger-example")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	lines := bufio.NewScanner(out)
	// What the README says of the key: in the arguments or in _meta, and
	// a call without one is refused with idempotency_key_required.
	for id, tc := range []struct{ args, meta, want string }{
		{`{"sku":"A","quantity":2,"idempotencyKey":"order-1"}`, ``, `"dev.mcprel/replayed":false`},
		{`{"sku":"A","quantity":2,"idempotencyKey":"order-1"}`, ``, `"dev.mcprel/replayed":true`},
		{`{"sku":"A","quantity":2}`, `"dev.mcprel/idempotencyKey":"order-1",`, `"dev.mcprel/replayed":true`},
		{`{"sku":"A","quantity":2}`, ``, `idempotency_key_required`},
	} {
		fmt.Fprintf(in, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"reserve","arguments":%s,`+
			`"_meta":{%s"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`+"\n", id, tc.args, tc.meta)
		if !lines.Scan() {
			t.Fatal("no response")
		}
		if line := lines.Text(); !strings.Contains(line, tc.want) || strings.Contains(line, `"isError":true`) != (tc.want == "idempotency_key_required") {
			t.Fatalf("call %d: %s, want %s", id, line, tc.want)
		}
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "reservations.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM reservations`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d reservation rows (%v), want 1", n, err)
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/payouts"
	"github.com/mcprel/mcprel/internal/readmetest"
	"github.com/mcprel/mcprel/store"
)

// TestReadmeShowsThisFile keeps the README's outbox example compiling:
// the README must quote main.go verbatim.
func TestReadmeShowsThisFile(t *testing.T) {
	readmetest.QuotesFile(t, "main.go")
}

// TestRetryPaysOnce runs the example against the demo provider: a payout
// retried with its key is paid once, delivered with the token, and the
// retry is the same operation.
func TestRetryPaysOnce(t *testing.T) {
	dir := t.TempDir()
	pdb, err := store.Open(context.Background(), filepath.Join(dir, "provider.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	p, err := payouts.Open(context.Background(), pdb, &payouts.Options{Token: "example-token"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p)
	defer hs.Close()

	bin := filepath.Join(dir, "outbox-example")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PAYMENTS_URL="+hs.URL+"/payouts", "PAYMENTS_TOKEN=example-token")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	var operations []string
	for id, want := range []string{`"dev.mcprel/replayed":false`, `"dev.mcprel/replayed":true`} {
		fmt.Fprintf(in, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"pay","arguments":{"account":"acme","cents":1200,"idempotencyKey":"invoice-7"},`+
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`+"\n", id)
		if !lines.Scan() {
			t.Fatal("no response")
		}
		line := lines.Text()
		if !strings.Contains(line, want) || !strings.Contains(line, `"state":"delivered"`) {
			t.Fatalf("call %d: %s, want %s and the payout delivered", id, line, want)
		}
		_, rest, _ := strings.Cut(line, "payout op_")
		operations = append(operations, strings.Fields(rest)[0])
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the example exited with %v", err)
	}
	if operations[0] != operations[1] {
		t.Fatalf("the retry is operation %s, the first %s", operations[1], operations[0])
	}
	if paid, _ := p.Paid(context.Background(), "acme"); paid.Payouts != 1 || paid.Cents != 1200 {
		t.Fatalf("the provider paid %+v, want once", paid)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/store"
)

// mailPolicy names send_email's reconcile_with: list_sent.
const mailPolicy = "../../examples/gateway/mail.yaml"

// unknownOutcome leaves tenant's call of tool with key of unknown outcome,
// as a gateway whose forward lost its answer does.
func unknownOutcome(t testing.TB, l *ledger.Ledger, tenant, tool, key string) {
	t.Helper()
	ctx := context.Background()
	c, _, err := l.ClaimOnce(ctx, ledger.Op{Tenant: tenant, Tool: tool, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unknown(ctx, "the connection broke with the request sent"); err != nil {
		t.Fatal(err)
	}
}

// listJSON runs "ledger list --json" with args and decodes what it prints.
func listJSON(t testing.TB, args ...string) listed {
	t.Helper()
	var out, errb bytes.Buffer
	if err := ledgerCmd(context.Background(), append([]string{"list", "--json"}, args...), &out, &errb); err != nil {
		t.Fatalf("ledger list %v: %v; %s", args, err, errb.String())
	}
	var got listed
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got.Records == nil {
		t.Fatalf("ledger list %v printed %s (%v)", args, out.String(), err)
	}
	return got
}

// "ledger list" lists the unknown outcomes, newest first, filtered and a
// page at a time, each with its reconcile_with read and the command that
// closes it, read-only beside the ledger's writer.
func TestLedgerList(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		// A clock that moves a millisecond each time it is read: the
		// records' order is theirs, not how many fall in one
		// millisecond of a loaded machine's clock.
		base, ticks := time.Now(), atomic.Int64{}
		now := func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
		w := ledgertest.Open(t, dsn, nil, &ledger.Options{Now: now}, "")
		var out bytes.Buffer
		if err := ledgerCmd(ctx, []string{"list", "--db", dsn}, &out, &out); err != nil || strings.TrimSpace(out.String()) != "nothing waiting" {
			t.Fatalf("an empty inbox: %v, %q", err, out.String())
		}
		unknownOutcome(t, w, "acme", "send_email", "m-1")
		unknownOutcome(t, w, "", "send_email", "m 2")
		unknownOutcome(t, w, "acme", "send_receipt", "r-1")
		if _, err := w.Do(ctx, ledger.Op{Tenant: "acme", Tool: "send_email", Key: "done"}, func(context.Context, *store.Tx) (json.RawMessage, error) {
			return json.RawMessage(`{"content":[]}`), nil
		}); err != nil {
			t.Fatal(err)
		}

		got := listJSON(t, "--db", dsn, "--policy", mailPolicy)
		var keys []string
		for _, r := range got.Records {
			keys = append(keys, r.Tenant+"/"+r.Tool+"/"+r.Key)
			if r.State != "unknown" || r.Reason == "" || r.Executions != 1 || r.At == "" || r.ExpiresAt == "" {
				t.Errorf("listed %+v", r)
			}
			if want := map[string]string{"send_email": "list_sent", "send_receipt": "list_sent"}[r.Tool]; r.ReconcileWith != want {
				t.Errorf("%s: reconcile_with %q, want %q", r.Key, r.ReconcileWith, want)
			}
		}
		if strings.Join(keys, " ") != "acme/send_receipt/r-1 /send_email/m 2 acme/send_email/m-1" || got.NextCursor != "" {
			t.Fatalf("listed %v, next %q", keys, got.NextCursor)
		}
		if r := got.Records[1]; r.Resolve != "mcprel ledger resolve --db "+shellQuote(dsn)+" --tool send_email --key 'm 2'" {
			t.Errorf("resolve command %q", r.Resolve)
		}
		if r := got.Records[0]; !strings.Contains(r.Resolve, " --tenant acme --tool send_receipt --key r-1") {
			t.Errorf("resolve command %q", r.Resolve)
		}

		for _, tc := range []struct {
			args []string
			want int
		}{
			{[]string{"--tenant", "acme"}, 2},
			{[]string{"--tenant", ""}, 1},
			{[]string{"--tool", "send_receipt"}, 1},
			{[]string{"--older-than", "1h"}, 0},
			{[]string{"--state", "committed"}, 1},
			{[]string{"--state", "all"}, 4},
		} {
			if got := listJSON(t, append([]string{"--db", dsn}, tc.args...)...); len(got.Records) != tc.want {
				t.Errorf("ledger list %v: %d records, want %d", tc.args, len(got.Records), tc.want)
			}
		}

		// Pages of one, each once.
		var paged []string
		args := []string{"--db", dsn, "--limit", "1"}
		for {
			page := listJSON(t, args...)
			for _, r := range page.Records {
				paged = append(paged, r.Key)
			}
			if page.NextCursor == "" {
				break
			}
			args = []string{"--db", dsn, "--limit", "1", "--cursor", page.NextCursor}
		}
		if strings.Join(paged, ",") != "r-1,m 2,m-1" {
			t.Errorf("paged %v", paged)
		}

		// The table, the commands, and where the next page is.
		out.Reset()
		if err := ledgerCmd(ctx, []string{"list", "--db", dsn, "--limit", "2", "--policy", mailPolicy}, &out, &out); err != nil {
			t.Fatal(err)
		}
		text := out.String()
		for _, want := range []string{"STATE", "RECONCILE_WITH", "list_sent", `"m 2"`, "--key 'm 2'", "--forget", "More: run the same command with --cursor "} {
			if !strings.Contains(text, want) {
				t.Errorf("the table lacks %q:\n%s", want, text)
			}
		}

		for _, bad := range [][]string{{"--state", "lost"}, {"--limit", "0"}, {"--limit", "1001"}, {"--older-than", "-1s"}, {"--cursor", "nope"}, {"extra"}} {
			var errb bytes.Buffer
			err := ledgerCmd(ctx, append([]string{"list", "--db", dsn}, bad...), &errb, &errb)
			if _, usage := err.(usageError); !usage {
				t.Errorf("ledger list %v: %v, want a usage error", bad, err)
			}
		}
	})
}

// The command "ledger list" prints for an unknown outcome closes it, run
// by a shell as printed (with the operator's choice added), however its
// tenant and key are spelled; then nothing is waiting.
func TestLedgerListResolveCommandRuns(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		w := ledgertest.Open(t, dsn, nil, nil, "")
		tenant, key := `o'brien & co`, `k 1 $HOME "x" ;echo`
		unknownOutcome(t, w, tenant, "send_email", key)
		out, err := exec.Command(binary, "ledger", "list", "--db", dsn, "--json").Output()
		if err != nil {
			t.Fatalf("ledger list: %v", err)
		}
		var got listed
		if err := json.Unmarshal(out, &got); err != nil || len(got.Records) != 1 {
			t.Fatalf("ledger list printed %s (%v)", out, err)
		}
		cmd := strings.Replace(got.Records[0].Resolve, "mcprel ", shellQuote(binary)+" ", 1) + " --failed 'checked: it was not sent'"
		if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		rec, err := w.Lookup(context.Background(), tenant, "send_email", key)
		if err != nil || rec.State != ledger.Committed || !strings.Contains(string(rec.Result), "it was not sent") {
			t.Fatalf("after the printed command: %+v, %v", rec, err)
		}
		out, err = exec.Command(binary, "ledger", "list", "--db", dsn).Output()
		if err != nil || strings.TrimSpace(string(out)) != "nothing waiting" {
			t.Fatalf("ledger list after resolving: %v, %s", err, out)
		}
		out, err = exec.Command(binary, "ledger", "list", "--db", dsn, "--state", "failed").Output()
		if err != nil || !strings.Contains(string(out), "failed") || !strings.Contains(string(out), `"o'brien & co"`) {
			t.Fatalf("ledger list --state failed: %v, %s", err, out)
		}
	})
}

// A database that is not there is reported, not created.
func TestLedgerListMissingDatabase(t *testing.T) {
	db := storetest.SQLite(t)
	var out bytes.Buffer
	err := ledgerCmd(context.Background(), []string{"list", "--db", db}, &out, &out)
	if err == nil || !strings.Contains(fmt.Sprint(err), "no such file") {
		t.Fatalf("ledger list of a missing file: %v", err)
	}
}

// The README's reconcile walkthrough works as written, from the
// repository's root: "ledger list" shows the unknown outcome with its
// read and the command that closes it, "ledger resolve" closes it, and
// then nothing is waiting and the record says what the operator found.
func TestReadmeReconcileLines(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "gateway.db")
	w := ledgertest.Open(t, db, nil, nil, "")
	unknownOutcome(t, w, "", "send_email", "r-1")
	lines := readmeLinesWith(t, "bin/mcprel ledger ")
	if len(lines) != 2 {
		t.Fatalf("the README has %d ledger lines, want list then resolve: change this test with it", len(lines))
	}
	run := func(l readmeLine) string {
		words, err := splitCommand(strings.NewReplacer("bin/mcprel", binary, "$PWD", dir).Replace(l.text))
		if err != nil {
			t.Fatalf("README.md:%d: %v", l.number, err)
		}
		cmd := exec.Command(words[0], words[1:]...)
		cmd.Dir = "../.."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README.md:%d: %s: %v\n%s", l.number, l.text, err, out)
		}
		return string(out)
	}
	out := run(lines[0])
	for _, want := range []string{"send_email", "r-1", "list_sent", "mcprel ledger resolve --db " + db + " --tool send_email --key r-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("README.md:%d prints no %q:\n%s", lines[0].number, want, out)
		}
	}
	run(lines[1])
	if out := run(lines[0]); strings.TrimSpace(out) != "nothing waiting" {
		t.Errorf("after the resolve line, ledger list says:\n%s", out)
	}
	rec, err := w.Lookup(context.Background(), "", "send_email", "r-1")
	if err != nil || rec.State != ledger.Committed || !strings.Contains(string(rec.Result), "list_sent shows nothing") {
		t.Errorf("after the resolve line the record is %+v, %v", rec, err)
	}
}

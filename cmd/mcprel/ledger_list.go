package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/review"
)

const ledgerListUsage = "usage: mcprel ledger list [--state unknown|in_progress|failed|committed|all] [--tenant T] [--tool NAME] [--older-than D] [--limit N] [--cursor C] [--policy FILE] [--json] [--db PATH|URL]"

// listedRecord is one record "ledger list --json" prints. Its members are
// always there, empty when they say nothing, so that scripts read one
// shape.
type listedRecord struct {
	State  string `json:"state"`
	At     string `json:"at"` // RFC 3339: when it became what State says
	Tenant string `json:"tenant"`
	Tool   string `json:"tool"`
	Key    string `json:"key"`
	// Executions counts the times the effect was started.
	Executions int    `json:"executions"`
	ExpiresAt  string `json:"expires_at"`
	// Reason says why an outcome is unknown.
	Reason string `json:"reason"`
	// ReconcileWith is the read the policy (--policy) names to check
	// what an operation of unknown outcome did.
	ReconcileWith string `json:"reconcile_with"`
	// Resolve is the command that closes an unknown outcome, once one
	// of --result FILE, --failed MESSAGE or --forget is added to it.
	Resolve string `json:"resolve"`
}

// listed is what "ledger list --json" prints.
type listed struct {
	Records []listedRecord `json:"records"`
	// NextCursor, when not empty, is the --cursor of the next page.
	NextCursor string `json:"next_cursor"`
}

// ledgerList is "mcprel ledger list": the reconcile inbox. It lists the
// ledger's records, newest first and a page at a time, by default those
// whose outcome is unknown, each with the read its policy reconciles it
// with and the command that closes it. It opens the database read-only,
// so it runs beside a gateway that is serving.
func ledgerList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ledger list", flag.ContinueOnError)
	fs.SetOutput(stdout)
	setUsage(fs, ledgerListUsage,
		`Lists the ledger's records, newest first and a page at a time: by
default the operations whose outcome is unknown, which wait for an
operator to check what they did and close them with "mcprel ledger
resolve" (printed for each). The database is opened read-only, beside a
running gateway. Exit status: 0 listed (or nothing waiting), 1 a
failure, 2 a mistake in the command line.`)
	db := dbFlags{readOnly: true}
	db.register(fs)
	state := fs.String("state", ledger.ListUnknown, "the records to list: unknown (outcome unknown: the reconcile inbox), in_progress, failed (committed with a failure), committed, or all")
	tenant := fs.String("tenant", "", "list only this tenant's records (\"\" is the tenant of calls made without a token); default every tenant")
	tool := fs.String("tool", "", "list only this tool's records")
	olderThan := fs.Duration("older-than", 0, "list only records that have been in their state at least this long (e.g. 1h)")
	limit := fs.Int("limit", ledger.DefaultListLimit, fmt.Sprintf("the most records to list (1 to %d); the cursor of the next page is printed after them", ledger.MaxListLimit))
	cursor := fs.String("cursor", "", "go on after the page that printed this cursor (with the same filters)")
	policyFile := fs.String("policy", "", "the gateway's --policy (the YAML or JSON of mcprel review): names each tool's retry.reconcile_with, the read an unknown outcome is checked with")
	asJSON := fs.Bool("json", false, "print JSON: {\"records\": [...], \"next_cursor\": \"...\"}")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	q := ledger.ListQuery{Tool: *tool, Cursor: *cursor, Limit: *limit}
	switch {
	case *state == "all":
	case slices.Contains(ledger.ListStates, *state):
		q.State = *state
	default:
		return usagef("ledger list: --state must be one of %s or all, not %q", strings.Join(ledger.ListStates, ", "), *state)
	}
	set := setFlags(fs)
	if set["tenant"] {
		q.Tenant = tenant
	}
	if *limit < 1 || *limit > ledger.MaxListLimit {
		return usagef("ledger list: --limit must be 1 to %d, not %d", ledger.MaxListLimit, *limit)
	}
	if *olderThan < 0 {
		return usagef("ledger list: --older-than must not be negative, not %v", *olderThan)
	}
	if *olderThan > 0 {
		q.Before = time.Now().Add(-*olderThan)
	}
	reconcile := map[string]string{}
	if *policyFile != "" {
		data, err := readSmallFile(*policyFile, maxSecretFile)
		if err != nil {
			return usagef("ledger list: --policy: %v", err)
		}
		rp, err := review.Parse(*policyFile, data)
		if err != nil {
			return usagef("ledger list: --policy: %v", err)
		}
		for _, op := range rp.Operations {
			if op.Retry.ReconcileWith != "" {
				reconcile[op.Name] = op.Retry.ReconcileWith
			}
		}
	}
	if err := db.check(fs); err != nil {
		return err
	}
	l, closeDB, err := db.open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	page, err := l.List(ctx, q)
	if errors.Is(err, ledger.ErrBadCursor) {
		return usagef("ledger list: --cursor %q is not one a listing printed", *cursor)
	}
	if err != nil {
		return err
	}
	// The command names the database as this one was named: by --db,
	// unless the URL holds a password, which stays in MCPREL_DB.
	dbArg := ""
	if set["db"] {
		dbArg = db.dsn
	}
	out := listed{Records: []listedRecord{}, NextCursor: page.Next}
	for _, r := range page.Records {
		lr := listedRecord{State: r.ListState(), At: r.At.UTC().Format(time.RFC3339Nano), Tenant: r.Tenant, Tool: r.Tool, Key: r.Key,
			Executions: r.Executions, ExpiresAt: r.ExpiresAt.UTC().Format(time.RFC3339)}
		if r.State == ledger.OutcomeUnknown {
			lr.Reason, lr.ReconcileWith = r.UnknownReason(), reconcile[r.Tool]
			lr.Resolve = ledger.ResolveCommand(dbArg, r.Tenant, r.Tool, r.Key)
		}
		out.Records = append(out.Records, lr)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printListed(stdout, out)
	return nil
}

// printListed prints a listing as a table, then the commands that close
// its unknown outcomes and the one that lists the next page.
func printListed(w io.Writer, out listed) {
	if len(out.Records) == 0 {
		fmt.Fprintln(w, "nothing waiting")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tAT\tTENANT\tTOOL\tKEY\tEXECUTIONS\tRECONCILE_WITH\tREASON")
	var resolve []string
	for _, r := range out.Records {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.State, r.At, tenantCell(r.Tenant), cell(r.Tool), cell(r.Key), r.Executions, cell(r.ReconcileWith), lastCell(r.Reason))
		if r.Resolve != "" {
			resolve = append(resolve, r.Resolve)
		}
	}
	tw.Flush()
	if len(resolve) > 0 {
		fmt.Fprintln(w, "\nCheck what each did (with its RECONCILE_WITH read, or at the upstream), then close it with its command and one of\n--result FILE (the result it had), --failed MESSAGE, or --forget (it never took effect):")
		for _, c := range resolve {
			fmt.Fprintln(w, "  "+c)
		}
	}
	if out.NextCursor != "" {
		fmt.Fprintf(w, "\nMore: run the same command with --cursor %s\n", out.NextCursor)
	}
}

// cell is s as a table shows it: "-" when empty, quoted when it holds
// blanks or control characters that would break the columns.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// tenantCell is the tenant as the table shows it: "" for the tenant of
// calls made without a token.
func tenantCell(s string) string {
	if s == "" {
		return `""`
	}
	return cell(s)
}

// lastCell is s in the table's last column, where blanks break nothing.
func lastCell(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// shellQuote quotes s for a POSIX shell when it holds more than letters,
// digits and -._/:@=,+%.
func shellQuote(s string) string { return ledger.ShellQuote(s) }

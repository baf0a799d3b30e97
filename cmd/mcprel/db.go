package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mcprel/mcprel/delivery"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/store"
)

// defaultDB is the SQLite file "mcprel serve" keeps its ledger in, relative
// to the working directory.
const defaultDB = "mcprel.db"

// dbFlags are the flags that choose and tune the ledger's database.
type dbFlags struct {
	dsn         string
	synchronous string
	retention   time.Duration
	lease       time.Duration
	readOnly    bool // ledger show and list: inspect, never create or change
	mustExist   bool // ledger resolve: change a ledger that is there, never create one
}

// register adds the flags to fs. A read-only command gets only --db: how
// durable a write is and how long a record is kept mean nothing to it
// (each record carries its own expiry).
func (f *dbFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dsn, "db", "", "the ledger's database: a SQLite file path, or a postgres:// URL shared by replicas; default $MCPREL_DB, else "+defaultDB+" (a URL with a password belongs in MCPREL_DB, not in the process list)")
	if f.readOnly {
		f.synchronous, f.retention = "FULL", ledger.DefaultRetention
		return
	}
	fs.StringVar(&f.synchronous, "synchronous", "FULL", "SQLite durability: FULL survives power loss; NORMAL is faster and survives process crashes only")
	fs.DurationVar(&f.retention, "retention", ledger.DefaultRetention, "how long idempotency records are kept")
	fs.DurationVar(&f.lease, "lease", ledger.DefaultLease, "how long a claimed key outlives a process that died holding it (a live one renews it): a call's duplicates are told in_progress that long, after which the key is taken over, or, forwarded at most once by the gateway, reads as outcome_unknown")
}

// check validates the flags fs parsed, naming each as the user typed it,
// and picks the default database.
func (f *dbFlags) check(fs *flag.FlagSet) error {
	if f.dsn == "" {
		if setFlags(fs)["db"] {
			return usagef("%s: --db must name a SQLite file or a postgres:// URL; it is empty", fs.Name())
		}
		f.dsn = cmp.Or(os.Getenv("MCPREL_DB"), defaultDB)
	}
	if err := store.CheckDSN(f.dsn); err != nil {
		return usagef("%s: --db: %v", fs.Name(), strings.TrimPrefix(err.Error(), "store: "))
	}
	switch strings.ToUpper(f.synchronous) {
	case "FULL", "NORMAL":
	default:
		return usagef("%s: --synchronous must be FULL or NORMAL, not %q", fs.Name(), f.synchronous)
	}
	if f.retention <= 0 {
		return usagef("%s: --retention must be positive, not %v", fs.Name(), f.retention)
	}
	if f.readOnly {
		f.lease = ledger.DefaultLease
	}
	if f.lease <= 0 || f.lease > f.retention {
		return usagef("%s: --lease must be positive and no longer than --retention (%v), not %v", fs.Name(), f.retention, f.lease)
	}
	if f.mustExist && !strings.Contains(f.dsn, "://") {
		if _, err := os.Stat(f.dsn); err != nil {
			return fmt.Errorf("%s: no ledger at %s: %w", fs.Name(), f.dsn, err)
		}
	}
	return nil
}

// open opens the database and the ledger in it, for the ledger commands
// (serve opens its own through package host).
func (f *dbFlags) open(ctx context.Context) (*ledger.Ledger, func(), error) {
	db, err := store.Open(ctx, f.dsn, &store.Options{Synchronous: f.synchronous, ReadOnly: f.readOnly})
	if err != nil {
		return nil, nil, err
	}
	l, err := ledger.Open(ctx, db, &ledger.Options{Retention: f.retention, Lease: f.lease})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return l, func() { db.Close() }, nil
}

// ledgerCmd is "mcprel ledger list", "mcprel ledger show" and "mcprel
// ledger resolve".
func ledgerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, ledgerListUsage)
		fmt.Fprintln(stdout, ledgerShowUsage)
		fmt.Fprintln(stdout, ledgerResolveUsage)
		fmt.Fprintln(stdout, `Run "mcprel ledger list -h", "mcprel ledger show -h" or "mcprel ledger resolve -h" for their flags.`)
		return nil
	}
	switch {
	case len(args) > 0 && args[0] == "list":
		return ledgerList(ctx, args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "show":
		return ledgerShow(ctx, args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "resolve":
		return ledgerResolve(ctx, args[1:], stdout, stderr)
	}
	return usagef("%s\n%s\n%s", ledgerListUsage, ledgerShowUsage, ledgerResolveUsage)
}

const (
	ledgerShowUsage    = "usage: mcprel ledger show --tool NAME --key KEY [--tenant T] [--db PATH|URL]"
	ledgerResolveUsage = "usage: mcprel ledger resolve --tool NAME --key KEY [--tenant T] [--db PATH|URL] (--result FILE | --failed MESSAGE | --forget)"
)

// operationFlags name one operation in the ledger.
type operationFlags struct {
	db                dbFlags
	tenant, tool, key *string
}

func (o *operationFlags) register(fs *flag.FlagSet) {
	o.db.register(fs)
	o.tenant = fs.String("tenant", "", "the tenant the operation belongs to: the TENANT of the --token the caller used with \"mcprel serve --http\" or \"mcprel gateway --http\"; \"\" (the default) over stdio, with --auth-token, or without tokens")
	o.tool = fs.String("tool", "", "the tool that ran the operation, as its callers name it")
	o.key = fs.String("key", "", "the operation's idempotency key")
}

// ledgerShow is "mcprel ledger show": the record of one operation, for
// reconciling by key from a shell. It opens the database read-only, so a
// mistyped path is reported, never created as an empty ledger that would
// answer "never committed" and invite a second run of the operation.
func ledgerShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ledger show", flag.ContinueOnError)
	fs.SetOutput(stdout)
	setUsage(fs, ledgerShowUsage,
		`Prints the ledger's record of one operation, for reconciling by key from
a shell; the database is opened read-only. Exit status: 0 the record was
printed, 3 there is none, 1 a failure, 2 a mistake in the command line.`)
	op := operationFlags{db: dbFlags{readOnly: true}}
	op.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *op.tool == "" || *op.key == "" {
		return usagef("ledger show: --tool and --key are required\n%s", ledgerShowUsage)
	}
	if err := op.db.check(fs); err != nil {
		return err
	}
	l, closeDB, err := op.db.open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	// A database with an outbox shows the operation's deliveries too;
	// opened read-only, it is read, never created.
	ob, err := outbox.Open(ctx, l.DB(), nil)
	if err != nil {
		ob = nil
	}
	return showRecord(ctx, l, ob, op, stdout)
}

// showRecord prints the record of op's key, and its deliveries in ob
// (which may be nil).
func showRecord(ctx context.Context, l *ledger.Ledger, ob *outbox.Outbox, op operationFlags, stdout io.Writer) error {
	shown, err := idempotency.LookupOperation(ctx, l, *op.tenant, *op.tool, *op.key)
	if err != nil {
		return err
	}
	if !shown.Found {
		json.NewEncoder(stdout).Encode(shown)
		return errNotFound
	}
	if ob != nil {
		if err := delivery.Deliveries(ob)(ctx, *op.tenant, *op.tool, *op.key, &shown); err != nil {
			return err
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(shown)
}

// ledgerResolve is "mcprel ledger resolve": an operator who checked what
// an operation with an unknown outcome did (at the upstream, the
// provider) closes its record — with the result it had, which retries
// with the key then get; as failed, with a message retries get; or
// forgotten, when it never took effect, so that the next call with the
// key runs. Only a record whose outcome is unknown (or whose claim's
// holder died) is changed.
func ledgerResolve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ledger resolve", flag.ContinueOnError)
	fs.SetOutput(stdout)
	setUsage(fs, ledgerResolveUsage,
		`Closes an operation whose outcome is unknown, after you checked what it
did: with the result it had, as failed, or forgotten (it never took
effect, and the next call with the key runs). Exit status: 0 closed,
3 no such record, 1 a failure, 2 a mistake in the command line.`)
	op := operationFlags{db: dbFlags{mustExist: true}}
	op.register(fs)
	resultFile := fs.String("result", "", "a file holding the tool result the operation had, as JSON: an object with a \"content\" array, as tools/call returns it")
	failed := fs.String("failed", "", "record the operation as failed with this message: retries with the key get it as an \"operation_failed\" failure")
	forget := fs.Bool("forget", false, "remove the record: the operation never took effect, and the next call with the key runs it")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *op.tool == "" || *op.key == "" {
		return usagef("ledger resolve: --tool and --key are required\n%s", ledgerResolveUsage)
	}
	chosen := 0
	for _, set := range []bool{*resultFile != "", *failed != "", *forget} {
		if set {
			chosen++
		}
	}
	if chosen != 1 {
		return usagef("ledger resolve: give exactly one of --result FILE, --failed MESSAGE and --forget\n%s", ledgerResolveUsage)
	}
	var result json.RawMessage
	switch {
	case *resultFile != "":
		data, err := readSmallFile(*resultFile, maxResultFile)
		if err != nil {
			return usagef("ledger resolve: --result: %v", err)
		}
		var shape struct {
			Content []json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(data, &shape); err != nil || shape.Content == nil {
			return usagef("ledger resolve: --result %s is not a tool result: a JSON object with a \"content\" array, such as {\"content\":[{\"type\":\"text\",\"text\":\"...\"}]}", *resultFile)
		}
		result = data
	case *failed != "":
		b, err := json.Marshal((&mcp.ToolError{Code: mcp.FailureOperationFailed, Message: *failed}).Result())
		if err != nil {
			return err
		}
		result = b
	}
	if err := op.db.check(fs); err != nil {
		return err
	}
	l, closeDB, err := op.db.open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	if *forget {
		err = l.Forget(ctx, *op.tenant, *op.tool, *op.key)
	} else {
		err = l.Resolve(ctx, *op.tenant, *op.tool, *op.key, result)
	}
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		json.NewEncoder(stdout).Encode(idempotency.Operation{Advice: "no record for this key (or its record expired): nothing to resolve"})
		return errNotFound
	case errors.Is(err, ledger.ErrNotUnknown):
		rec, lerr := l.Lookup(ctx, *op.tenant, *op.tool, *op.key)
		if lerr != nil {
			return lerr
		}
		return fmt.Errorf("ledger resolve: the operation is %s, not of unknown outcome: nothing changed", rec.State)
	case err != nil:
		return err
	}
	if *forget {
		fmt.Fprintln(stdout, `{"forgotten":true,"advice":"the key is free: the next call with it runs the operation"}`)
		return nil
	}
	return showRecord(ctx, l, nil, op, stdout)
}

// maxResultFile bounds a --result file.
const maxResultFile = 1 << 20

// errNotFound makes "ledger show" exit 3 for an unknown key, so scripts can
// tell "never committed" from a failure.
var errNotFound = errors.New("no record for this key")

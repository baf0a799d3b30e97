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
	"time"

	"github.com/mcprel/mcprel/ledger"
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
}

func (f *dbFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dsn, "db", "", "the ledger's database: a SQLite file path, or a postgres:// URL shared by replicas; default $MCPREL_DB, else "+defaultDB+" (a URL with a password belongs in MCPREL_DB, not in the process list)")
	fs.StringVar(&f.synchronous, "synchronous", "FULL", "SQLite durability: FULL survives power loss; NORMAL is faster and survives process crashes only")
	fs.DurationVar(&f.retention, "retention", ledger.DefaultRetention, "how long idempotency records are kept")
}

// open opens the database and the ledger in it.
func (f *dbFlags) open(ctx context.Context) (*ledger.Ledger, func(), error) {
	if f.dsn == "" {
		f.dsn = cmp.Or(os.Getenv("MCPREL_DB"), defaultDB)
	}
	if f.retention <= 0 {
		return nil, nil, fmt.Errorf("--retention must be positive")
	}
	db, err := store.Open(ctx, f.dsn, &store.Options{Synchronous: f.synchronous})
	if err != nil {
		return nil, nil, err
	}
	l, err := ledger.Open(ctx, db, &ledger.Options{Retention: f.retention})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return l, func() { db.Close() }, nil
}

// ledgerCmd is "mcprel ledger show": the record of one operation, for
// reconciling by key from a shell.
func ledgerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "show" {
		fmt.Fprintln(stderr, "usage: mcprel ledger show --tool NAME --key KEY [--tenant T] [--db PATH|URL]")
		return errUsage
	}
	fs := flag.NewFlagSet("ledger show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var db dbFlags
	db.register(fs)
	tenant := fs.String("tenant", "", "the tenant the operation belongs to (\"\" for a single-tenant server)")
	tool := fs.String("tool", "", "the tool that ran the operation")
	key := fs.String("key", "", "the operation's idempotency key")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *tool == "" || *key == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "ledger show: --tool and --key are required")
		return errUsage
	}
	if db.dsn == "" {
		db.dsn = cmp.Or(os.Getenv("MCPREL_DB"), defaultDB)
	}
	// Opening a mistyped path would create an empty ledger and report the
	// operation as never committed, inviting a second run of it.
	if !store.IsPostgres(db.dsn) {
		if _, err := os.Stat(db.dsn); err != nil {
			return fmt.Errorf("ledger show: no ledger database at %s: %w", db.dsn, err)
		}
	}
	l, closeDB, err := db.open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	rec, err := l.Lookup(ctx, *tenant, *tool, *key)
	if errors.Is(err, ledger.ErrNotFound) {
		json.NewEncoder(stdout).Encode(lookupResult{Advice: "no operation with this key committed (or its record expired)"})
		return errNotFound
	}
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(describeRecord(rec))
}

// errNotFound makes "ledger show" exit 3 for an unknown key, so scripts can
// tell "never committed" from a failure.
var errNotFound = errors.New("no record for this key")

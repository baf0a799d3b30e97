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
	readOnly    bool // ledger show: inspect, never create or change
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
	return nil
}

// open opens the database and the ledger in it, for "ledger show"
// (serve opens its own through package host).
func (f *dbFlags) open(ctx context.Context) (*ledger.Ledger, func(), error) {
	db, err := store.Open(ctx, f.dsn, &store.Options{Synchronous: f.synchronous, ReadOnly: f.readOnly})
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
// reconciling by key from a shell. It opens the database read-only, so a
// mistyped path is reported, never created as an empty ledger that would
// answer "never committed" and invite a second run of the operation.
func ledgerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usageLine = "usage: mcprel ledger show --tool NAME --key KEY [--tenant T] [--db PATH|URL]"
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, usageLine)
		fmt.Fprintln(stdout, `Run "mcprel ledger show -h" for its flags.`)
		return nil
	}
	if len(args) == 0 || args[0] != "show" {
		return usagef("%s", usageLine)
	}
	fs := flag.NewFlagSet("ledger show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := dbFlags{readOnly: true}
	db.register(fs)
	tenant := fs.String("tenant", "", "the tenant the operation belongs to: the TENANT of the --token the caller used with \"mcprel serve --http\"; \"\" (the default) over stdio, with --auth-token, or without tokens")
	tool := fs.String("tool", "", "the tool that ran the operation")
	key := fs.String("key", "", "the operation's idempotency key")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *tool == "" || *key == "" {
		return usagef("ledger show: --tool and --key are required\n%s", usageLine)
	}
	if err := db.check(fs); err != nil {
		return err
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

package store

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/storetest"
)

// A database that cannot be opened is refused with the reason in words,
// never SQLite's "unable to open database file (14)", and a URL of a kind
// mcprel does not serve is never taken for a file name.
func TestOpenSaysWhyNot(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "plain")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dsn      string
		readOnly bool
		want     string
	}{
		{"mysql://root@localhost/test", false, `unsupported database URL scheme "mysql://"`},
		{"sqlite://x.db", false, `unsupported database URL scheme "sqlite://"`},
		{filepath.Join(dir, "missing", "x.db"), false, "its directory " + filepath.Join(dir, "missing") + " does not exist"},
		{filepath.Join(notDir, "x.db"), false, notDir + " is not a directory"},
		{dir, false, "it is a directory"},
		{filepath.Join(dir, "absent.db"), true, "no such file"},
		{"", false, "empty database path"},
	} {
		_, err := Open(context.Background(), tc.dsn, &Options{ReadOnly: tc.readOnly})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q, readOnly %v) = %v, want an error saying %q", tc.dsn, tc.readOnly, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "absent.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a read-only open created the file: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir)); len(entries) != 1 {
		t.Errorf("failed opens left files behind: %v", entries)
	}
}

// A PostgreSQL database that does not exist is refused with how to create
// it, on the server and as the user the URL names: the server's own words
// ("database does not exist") leave a new user to find createdb alone.
func TestOpenPostgresSaysHowToCreateTheDatabase(t *testing.T) {
	base := os.Getenv(storetest.PostgresEnv)
	if base == "" {
		t.Skip(storetest.PostgresEnv + " is not set: skipping the PostgreSQL variant")
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/mcprel_no_such_database"
	_, err = Open(context.Background(), u.String(), nil)
	want := "create it first: createdb -h " + u.Hostname()
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), " mcprel_no_such_database") {
		t.Fatalf("Open of a database that does not exist = %v, want an error saying %q and naming it", err, want)
	}
	if u.User != nil && !strings.Contains(err.Error(), "-U "+u.User.Username()) {
		t.Fatalf("%v: the createdb line does not name the URL's user %q", err, u.User.Username())
	}
}

// A read-only handle reads what a writer committed, writes nothing, and
// checks rather than applies migrations.
func TestReadOnly(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		rw, err := Open(ctx, dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rw.Close()
		steps := []Migration{{Version: 1, SQL: `CREATE TABLE ro_items (id BIGINT PRIMARY KEY)`}}
		if err := rw.Migrate(ctx, "ro-test", steps); err != nil {
			t.Fatal(err)
		}
		if err := rw.WriteTx(ctx, func(tx *Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO ro_items (id) VALUES (7)`)
			return err
		}); err != nil {
			t.Fatal(err)
		}

		ro, err := Open(ctx, dsn, &Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		if err := ro.Migrate(ctx, "ro-test", steps); err != nil {
			t.Fatalf("a current schema: %v", err)
		}
		newer := append(steps, Migration{Version: 2, SQL: `ALTER TABLE ro_items ADD COLUMN note TEXT`})
		if err := ro.Migrate(ctx, "ro-test", newer); err == nil || !strings.Contains(err.Error(), "open it once for writing") {
			t.Fatalf("an older schema: %v, want a refusal", err)
		}
		if err := ro.WriteTx(ctx, func(*Tx) error { return nil }); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("WriteTx on a read-only handle: %v", err)
		}
		var id int
		if err := ro.ReadTx(ctx, func(tx *Tx) error { return tx.QueryRow(ctx, `SELECT id FROM ro_items`).Scan(&id) }); err != nil || id != 7 {
			t.Fatalf("read %d, %v", id, err)
		}
	})
}

// Every read in one ReadTx sees the same snapshot, even when a writer
// commits between two of them.
func TestReadTxIsOneSnapshot(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db, err := Open(ctx, dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Migrate(ctx, "snapshot-test", []Migration{{Version: 1, SQL: `CREATE TABLE snap_a (n BIGINT NOT NULL); CREATE TABLE snap_b (n BIGINT NOT NULL)`}}); err != nil {
			t.Fatal(err)
		}
		insert := func() {
			t.Helper()
			if err := db.WriteTx(ctx, func(tx *Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO snap_a (n) VALUES (1)`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO snap_b (n) VALUES (1)`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		insert()
		var a, b int
		err = db.ReadTx(ctx, func(tx *Tx) error {
			if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM snap_a`).Scan(&a); err != nil {
				return err
			}
			insert() // commits between the two reads, on another connection
			return tx.QueryRow(ctx, `SELECT COUNT(*) FROM snap_b`).Scan(&b)
		})
		if err != nil || a != 1 || b != 1 {
			t.Fatalf("read %d rows of snap_a and %d of snap_b (%v); one snapshot sees 1 and 1", a, b, err)
		}
	})
}

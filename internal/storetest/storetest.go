// Package storetest gives tests (and benchmarks) a fresh database of each
// dialect: a SQLite file in a temporary directory always, and a PostgreSQL
// schema of its own when the environment names a server.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// PostgresEnv names the environment variable with the URL of a PostgreSQL
// database for tests; the PostgreSQL variants skip without it.
const PostgresEnv = "MCPREL_TEST_POSTGRES_URL"

// Each runs f as two subtests, "sqlite" and "postgres", each with the DSN of
// a fresh database.
func Each(t *testing.T, f func(t *testing.T, dsn string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { f(t, Postgres(t)) })
}

// SQLite returns the path of a SQLite file that does not exist yet.
func SQLite(t testing.TB) string {
	return filepath.Join(t.TempDir(), "test.db")
}

// Postgres returns a URL whose connections see only a schema created for
// this test and dropped after it, so tests in parallel packages never see
// each other's rows. It skips the test when PostgresEnv is unset.
func Postgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" {
		t.Skip(PostgresEnv + " is not set: skipping the PostgreSQL variant")
	}
	dsn, drop, err := FreshSchema(context.Background(), base, "mcprel_test_")
	if err != nil {
		t.Fatalf("%s: %v (it must name a database that exists: createdb creates one)", PostgresEnv, err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Error(err)
		}
	})
	return dsn
}

// FreshSchema creates a schema named prefix plus a random suffix in the
// database at base, and returns a URL whose connections use it and a
// function that drops it.
func FreshSchema(ctx context.Context, base, prefix string) (dsn string, drop func() error, err error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, err
	}
	var b [6]byte
	rand.Read(b[:])
	schema := prefix + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return "", nil, err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		return "", nil, fmt.Errorf("creating a schema: %w", err)
	}
	drop = func() error {
		admin, err := sql.Open("pgx", base)
		if err != nil {
			return err
		}
		defer admin.Close()
		if _, err := admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`); err != nil {
			return fmt.Errorf("dropping schema %s: %w", schema, err)
		}
		return nil
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}

// Tagged returns dsn with its PostgreSQL connections named application
// (pg_stat_activity.application_name), so a test can wait for the backends
// of a process it killed; a SQLite dsn comes back unchanged.
func Tagged(dsn, application string) string {
	if !isPostgres(dsn) {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set("application_name", application)
	u.RawQuery = q.Encode()
	return u.String()
}

// AwaitBackendsGone waits until no PostgreSQL backend named application
// (see Tagged) is left. When a client process is killed, its backend lives
// on until it notices: one in the middle of a COMMIT finishes it first.
// Until the backend is gone, what the killed process wrote is not settled.
// For a SQLite dsn it returns at once: a killed process's writes are
// settled when it dies.
func AwaitBackendsGone(t testing.TB, dsn, application string) {
	t.Helper()
	if !isPostgres(dsn) {
		return
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, application).Scan(&n); err != nil {
			t.Fatalf("waiting for the backends of %s: %v", application, err)
		}
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d backends of %s still running after 30 s", n, application)
		case <-tick.C:
		}
	}
}

// isPostgres is store.IsPostgres, which store's own tests cannot import
// through this package.
func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

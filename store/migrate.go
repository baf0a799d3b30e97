package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"time"
)

// Migration is one step of a component's schema. Steps are applied in
// Version order, each in its own transaction, exactly once per database.
type Migration struct {
	Version int
	// SQLite and Postgres are the statements for each dialect, separated
	// by semicolons; SQL serves a dialect whose own field is empty.
	SQLite, Postgres, SQL string
}

const migrationsTable = `CREATE TABLE IF NOT EXISTS mcprel_migrations (
	component TEXT NOT NULL,
	version INTEGER NOT NULL,
	applied_at BIGINT NOT NULL,
	PRIMARY KEY (component, version))`

// migrationsLock is the advisory lock that serialises creating the
// migrations table on PostgreSQL.
const migrationsLock = 0x6d6370726c // "mcprl"

// Migrate brings component's schema up to date. It is safe to call from
// several processes or replicas at once: SQLite serialises the steps with
// its write lock, PostgreSQL with an advisory lock per component.
func (db *DB) Migrate(ctx context.Context, component string, steps []Migration) error {
	for i := 1; i < len(steps); i++ {
		if steps[i].Version <= steps[i-1].Version {
			return fmt.Errorf("store: %s migrations out of order at version %d", component, steps[i].Version)
		}
	}
	if db.ro {
		return db.checkMigrated(ctx, component, steps)
	}
	if err := db.WriteTx(ctx, func(tx *Tx) error {
		// CREATE TABLE IF NOT EXISTS is not safe against itself on
		// PostgreSQL: two replicas opening at once can both try to create
		// the table's type and one fails. Take turns.
		if tx.db.dialect == Postgres {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(?)`, migrationsLock); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, migrationsTable)
		return err
	}); err != nil {
		return fmt.Errorf("store: creating the migrations table: %w", err)
	}
	h := fnv.New64a()
	h.Write([]byte(component))
	lock := int64(h.Sum64() >> 1)
	for _, m := range steps {
		err := db.WriteTx(ctx, func(tx *Tx) error {
			if tx.db.dialect == Postgres {
				if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(?)`, lock); err != nil {
					return err
				}
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM mcprel_migrations WHERE component = ? AND version = ?`, component, m.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			stmt := cmp.Or(m.SQLite, m.SQL)
			if tx.db.dialect == Postgres {
				stmt = cmp.Or(m.Postgres, m.SQL)
			}
			if stmt == "" {
				return fmt.Errorf("no statements for %s", tx.db.dialect)
			}
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO mcprel_migrations (component, version, applied_at) VALUES (?, ?, ?)`, component, m.Version, time.Now().UnixMilli())
			return err
		})
		if err != nil {
			return fmt.Errorf("store: %s migration %d: %w", component, m.Version, err)
		}
	}
	return nil
}

// checkMigrated verifies, without writing, that component's schema has
// every step: a database opened read-only cannot be migrated.
func (db *DB) checkMigrated(ctx context.Context, component string, steps []Migration) error {
	if len(steps) == 0 {
		return nil
	}
	want := steps[len(steps)-1].Version
	var have sql.NullInt64
	err := db.ReadTx(ctx, func(tx *Tx) error {
		return tx.QueryRow(ctx, `SELECT MAX(version) FROM mcprel_migrations WHERE component = ?`, component).Scan(&have)
	})
	if err != nil || int(have.Int64) < want {
		return fmt.Errorf("store: the %s schema in %s is missing or older than this version of mcprel needs (version %d); open it once for writing to create or migrate it", component, db.target, want)
	}
	return nil
}

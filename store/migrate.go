package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"
)

// Migration is one step of a component's schema. Steps are applied in
// Version order, each in its own transaction, exactly once per database.
type Migration struct {
	Version int
	// SQLite and Postgres are the statements for each dialect, separated
	// by semicolons.
	SQLite, Postgres string
}

const migrationsTable = `CREATE TABLE IF NOT EXISTS mcprel_migrations (
	component TEXT NOT NULL,
	version INTEGER NOT NULL,
	applied_at BIGINT NOT NULL,
	PRIMARY KEY (component, version))`

// Migrate brings component's schema up to date. It is safe to call from
// several processes or replicas at once: SQLite serialises the steps with
// its write lock, PostgreSQL with an advisory lock per component.
func (db *DB) Migrate(ctx context.Context, component string, steps []Migration) error {
	for i := 1; i < len(steps); i++ {
		if steps[i].Version <= steps[i-1].Version {
			return fmt.Errorf("store: %s migrations out of order at version %d", component, steps[i].Version)
		}
	}
	if err := db.WriteTx(ctx, func(tx *Tx) error {
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
			if tx.dialect == Postgres {
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
			stmt := m.SQLite
			if tx.dialect == Postgres {
				stmt = m.Postgres
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

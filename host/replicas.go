package host

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/status"
	"github.com/mcprel/mcprel/store"
)

// The replicas' board: a table in the shared store where each replica
// writes, every replicaEvery while it serves, its upstreams in brief, so
// that the status page of any replica behind a load balancer lists those
// of all. A row belongs to its replica's name: the write is an upsert on
// that name alone, so two processes given the same Options.Replica
// overwrite each other's row (the last writer wins) and the first to stop
// deletes it until the other writes again. Rows are dated by the writer's
// clock and read against the reader's: replicas whose clocks disagree by
// much more than replicaEvery may show as stale or not at all.
const (
	// replicaEvery is how often a replica writes its row.
	replicaEvery = 10 * time.Second
	// replicaStale is how old a row may be and still be shown; an older
	// one is a replica that stopped without saying so, and is deleted.
	replicaStale = time.Minute
	// maxReplicaBytes bounds a row's upstreams, as JSON: past it the list
	// is cut and says how many it left out.
	maxReplicaBytes = 64 << 10
	// replicaReapBatch bounds how many stale rows one tick deletes.
	replicaReapBatch = 100
	// replicaCountCap bounds the count of the replicas the page reads.
	replicaCountCap = 10000
	// replicaWriteTimeout bounds each write to the board, the last one at
	// shutdown included.
	replicaWriteTimeout = 5 * time.Second
)

// replicaMigrations create the board, the status page's own component
// in the store.
var replicaMigrations = []store.Migration{{
	Version: 1,
	SQL: `CREATE TABLE mcprel_status_replicas (
		replica    TEXT PRIMARY KEY,
		updated_at BIGINT NOT NULL,
		upstreams  TEXT NOT NULL);
		CREATE INDEX mcprel_status_replicas_updated ON mcprel_status_replicas (updated_at)`,
}}

// replicaRow is a row's upstreams: at most maxReplicaBytes of them, and
// how many more there were.
type replicaRow struct {
	Upstreams []json.RawMessage `json:"upstreams"`
	More      int               `json:"more,omitempty"`
}

// encodeReplicaRow writes ups as a row's JSON of at most maxReplicaBytes,
// leaving out, and counting, those past the bound.
func encodeReplicaRow(ups []status.ReplicaUpstream) ([]byte, error) {
	row := replicaRow{Upstreams: []json.RawMessage{}}
	// The envelope and the count of those left out take less than this.
	size := 64
	for i, u := range ups {
		b, err := json.Marshal(u)
		if err != nil {
			return nil, err
		}
		if size+len(b)+1 > maxReplicaBytes {
			row.More = len(ups) - i
			break
		}
		size += len(b) + 1
		row.Upstreams = append(row.Upstreams, b)
	}
	return json.Marshal(row)
}

// replicaBoard is this replica's row on the board, and what reads all
// of them.
type replicaBoard struct {
	db   *store.DB
	name string
	// upstreams lists this replica's upstreams; nil means none.
	upstreams func() []status.ReplicaUpstream
	// now is the board's clock.
	now    func() time.Time
	logger *slog.Logger
}

// run writes the row now and every replicaEvery, and deletes stale rows
// beside, until ctx ends.
func (b *replicaBoard) run(ctx context.Context) {
	t := time.NewTicker(replicaEvery)
	defer t.Stop()
	for {
		if err := b.tick(ctx); err != nil && ctx.Err() == nil {
			b.logger.Warn("status page: writing this replica's upstreams failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick writes the row and deletes a batch of stale rows.
func (b *replicaBoard) tick(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, replicaWriteTimeout)
	defer cancel()
	var ups []status.ReplicaUpstream
	if b.upstreams != nil {
		ups = b.upstreams()
	}
	data, err := encodeReplicaRow(ups)
	if err != nil {
		return err
	}
	now := b.now()
	return b.db.WriteTx(ctx, func(tx *store.Tx) error {
		// The row is this replica's by its name alone: no other
		// condition, so a restarted process (or another given the same
		// name) takes it over.
		if _, err := tx.Exec(ctx, `INSERT INTO mcprel_status_replicas (replica, updated_at, upstreams) VALUES (?, ?, ?)
			ON CONFLICT (replica) DO UPDATE SET updated_at = excluded.updated_at, upstreams = excluded.upstreams`,
			b.name, now.UnixMilli(), string(data)); err != nil {
			return err
		}
		// The date is checked again on the row deleted: under READ
		// COMMITTED a row the subquery chose may have been refreshed by
		// its live replica before the delete reached it.
		stale := now.Add(-replicaStale).UnixMilli()
		_, err := tx.Exec(ctx, `DELETE FROM mcprel_status_replicas WHERE updated_at < ? AND replica IN
			(SELECT replica FROM mcprel_status_replicas WHERE updated_at < ? ORDER BY updated_at LIMIT ?)`,
			stale, stale, replicaReapBatch)
		return err
	})
}

// remove deletes this replica's row: it stops serving.
func (b *replicaBoard) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), replicaWriteTimeout)
	defer cancel()
	err := b.db.WriteTx(ctx, func(tx *store.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM mcprel_status_replicas WHERE replica = ?`, b.name)
		return err
	})
	if err != nil {
		b.logger.Warn("status page: deleting this replica's upstreams failed; other replicas list them for a minute more", "err", err)
	}
}

// replicas reads at most limit of the rows written in the last
// replicaStale, the newest first, and counts them (up to replicaCountCap).
func (b *replicaBoard) replicas(ctx context.Context, limit int) ([]status.Replica, int, error) {
	since := b.now().Add(-replicaStale).UnixMilli()
	var out []status.Replica
	var total int
	err := b.db.ReadTx(ctx, func(tx *store.Tx) error {
		out, total = nil, 0
		var err error
		if total, _, err = tx.CountAtMost(ctx, replicaCountCap, `mcprel_status_replicas WHERE updated_at >= ?`, since); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT replica, updated_at, upstreams FROM mcprel_status_replicas
			WHERE updated_at >= ? ORDER BY updated_at DESC, replica LIMIT ?`, since, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name, data string
			var at int64
			if err := rows.Scan(&name, &at, &data); err != nil {
				return err
			}
			r := status.Replica{Name: name, LastSeen: time.UnixMilli(at), Upstreams: []status.ReplicaUpstream{}}
			var row struct {
				Upstreams []status.ReplicaUpstream `json:"upstreams"`
				More      int                      `json:"more"`
			}
			if err := json.Unmarshal([]byte(data), &row); err != nil {
				// One row that cannot be read does not hide the others.
				b.logger.Warn("status page: a replica's upstreams could not be read", "replica", name, "err", err)
			} else {
				r.Upstreams = append(r.Upstreams, row.Upstreams...)
				r.MoreUpstreams = max(row.More, 0)
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, err
	}
	return out, max(total, len(out)), nil
}

// replicaUpstreams is the gateway's upstreams as the board writes them.
func replicaUpstreams(gw *gateway.Gateway) func() []status.ReplicaUpstream {
	return func() []status.ReplicaUpstream {
		states := gw.Upstreams()
		out := make([]status.ReplicaUpstream, 0, len(states))
		for _, u := range states {
			ru := status.ReplicaUpstream{Name: u.Name, State: "down", Circuit: string(u.Circuit), InFlight: u.InFlight}
			if u.Connected {
				ru.State = "connected"
			}
			out = append(out, ru)
		}
		return out
	}
}

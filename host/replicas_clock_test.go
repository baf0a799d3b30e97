package host

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/status"
	"github.com/mcprel/mcprel/store"
)

// The board's loop writes the replica's row at once and every
// replicaEvery after, on the bubble's clock, and deletes a row once it is
// older than replicaStale; the row goes when the loop's replica stops.
func TestReplicaBoardClock(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db, err := store.Open(ctx, filepath.Join(dir, "board.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Migrate(ctx, "status", replicaMigrations); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		b := &replicaBoard{db: db, name: "r", now: time.Now, logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			upstreams: func() []status.ReplicaUpstream { return []status.ReplicaUpstream{{Name: "u", State: "connected"}} }}
		// Another replica last wrote 50 s ago.
		err = db.WriteTx(ctx, func(tx *store.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO mcprel_status_replicas (replica, updated_at, upstreams) VALUES (?, ?, ?)`,
				"ghost", start.Add(-50*time.Second).UnixMilli(), `{"upstreams":[]}`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		seen := func() map[string]time.Time {
			t.Helper()
			list, total, err := b.replicas(ctx, status.MaxReplicas)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]time.Time{}
			for _, r := range list {
				out[r.Name] = r.LastSeen
			}
			if total != len(list) {
				t.Errorf("total %d, listed %d", total, len(list))
			}
			return out
		}
		stored := func() int {
			t.Helper()
			var n int
			if err := db.QueryRow(ctx, `SELECT COUNT(*) FROM mcprel_status_replicas`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}

		loopCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { b.run(loopCtx); close(done) }()
		synctest.Wait()
		if got := seen(); len(got) != 2 || !got["r"].Equal(start) || got["ghost"].IsZero() {
			t.Fatalf("at start: %v", got)
		}

		time.Sleep(replicaEvery)
		synctest.Wait()
		// The ghost is now 60 s old: shown still, and kept.
		if got := seen(); len(got) != 2 || !got["r"].Equal(start.Add(replicaEvery)) {
			t.Fatalf("after %v: %v", replicaEvery, got)
		}

		time.Sleep(replicaEvery)
		synctest.Wait()
		// 70 s old: neither shown nor kept.
		if got := seen(); len(got) != 1 || !got["r"].Equal(start.Add(2*replicaEvery)) {
			t.Fatalf("after %v: %v", 2*replicaEvery, got)
		}
		if n := stored(); n != 1 {
			t.Fatalf("%d rows stored, want this replica's only", n)
		}

		stop()
		<-done
		b.remove()
		if n := stored(); n != 0 {
			t.Fatalf("%d rows stored after the replica stopped", n)
		}
	})
}

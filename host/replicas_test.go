package host_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/status"
	"github.com/mcprel/mcprel/store"
)

// newReplica builds a runtime named name on the database at dsn, with
// its status page, that writes ups as its upstreams.
func newReplica(t *testing.T, dsn, name string, ups []status.ReplicaUpstream) *host.Runtime {
	t.Helper()
	rt, err := host.New(context.Background(), &host.Options{
		Implementation: mcp.Implementation{Name: "replica-test", Version: "1"},
		Server:         server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		DB:             dsn,
		Addr:           "127.0.0.1:0",
		Metrics:        host.MetricsOptions{Addr: "127.0.0.1:0", Token: metricsToken},
		Replica:        name,
	})
	if err != nil {
		t.Fatal(err)
	}
	host.SetReplicaUpstreams(rt, ups)
	return rt
}

// replicasOf reads the replicas rt's status page lists.
func replicasOf(t *testing.T, rt *host.Runtime) *status.ReplicasSection {
	t.Helper()
	got := fetch(t, rt.StatusURL()+".json", metricsToken)
	var snap status.Snapshot
	if err := json.Unmarshal([]byte(got.body), &snap); err != nil || snap.Replicas == nil {
		t.Fatalf("%d %v: %s", got.code, err, got.body)
	}
	if !snap.Replicas.Available {
		t.Fatalf("the replicas are unavailable: %s", got.body)
	}
	return snap.Replicas
}

// names lists the replicas' names, in the page's order.
func names(s *status.ReplicasSection) []string {
	var out []string
	for _, r := range s.Replicas {
		out = append(out, r.Name)
	}
	return out
}

// openDB opens the database at dsn beside the runtimes, to read and write
// the board's rows directly.
func openDB(t *testing.T, dsn string) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func exec(t *testing.T, db *store.DB, query string, args ...any) {
	t.Helper()
	err := db.WriteTx(context.Background(), func(tx *store.Tx) error {
		_, err := tx.Exec(context.Background(), query, args...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// rowOf reads the board's row of replica; ok is false when there is none.
func rowOf(t *testing.T, db *store.DB, replica string) (updatedAt int64, upstreams string, ok bool) {
	t.Helper()
	err := db.QueryRow(context.Background(), `SELECT updated_at, upstreams FROM mcprel_status_replicas WHERE replica = ?`, replica).
		Scan(&updatedAt, &upstreams)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, "", false
		}
		t.Fatal(err)
	}
	return updatedAt, upstreams, true
}

// Two replicas on one database each list both, with their upstreams, the
// one that answered marked; one that stops gracefully is listed no more; a
// row not written for a minute is not shown and is deleted; a replica's
// write touches its own row only, and takes it back from another writer
// of the same name.
func TestStatusListsEveryReplica(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		a := newReplica(t, dsn, "replica-a", []status.ReplicaUpstream{{Name: "alpha", State: "connected", Circuit: "closed", InFlight: 3}})
		b := newReplica(t, dsn, "replica-b", []status.ReplicaUpstream{
			{Name: "beta", State: "down", Circuit: "open"}, {Name: "gamma", State: "connected", Circuit: "half-open"}})
		_, stopA := running(t, a)
		stopped := false
		defer func() {
			if !stopped {
				stopA()
			}
		}()
		_, stopB := running(t, b)
		bStopped := false
		defer func() {
			if !bStopped {
				stopB()
			}
		}()
		// Each has written its row by the time its page is read: the
		// loops write at start too, but when is not the test's to know.
		for _, rt := range []*host.Runtime{a, b} {
			if err := host.PublishReplica(rt); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			rt   *host.Runtime
			this string
		}{{a, "replica-a"}, {b, "replica-b"}} {
			s := replicasOf(t, tc.rt)
			if s.Total != 2 || s.More != 0 || len(s.Replicas) != 2 {
				t.Fatalf("%s lists %v", tc.this, names(s))
			}
			by := map[string]status.Replica{}
			for _, r := range s.Replicas {
				by[r.Name] = r
				if r.This != (r.Name == tc.this) {
					t.Errorf("%s's page marks %s as this one: %v", tc.this, r.Name, r.This)
				}
				if r.AgeSeconds < 0 || r.AgeSeconds > 60 || r.LastSeen.IsZero() {
					t.Errorf("%s's age: %+v", r.Name, r)
				}
			}
			if ra := by["replica-a"]; len(ra.Upstreams) != 1 || ra.Upstreams[0] != (status.ReplicaUpstream{Name: "alpha", State: "connected", Circuit: "closed", InFlight: 3}) {
				t.Errorf("replica-a on %s's page: %+v", tc.this, ra)
			}
			if rb := by["replica-b"]; len(rb.Upstreams) != 2 || rb.Upstreams[0].Name != "beta" || rb.Upstreams[0].Circuit != "open" ||
				rb.Upstreams[1].Name != "gamma" || rb.Upstreams[1].State != "connected" {
				t.Errorf("replica-b on %s's page: %+v", tc.this, rb)
			}
		}
		html := fetch(t, a.StatusURL(), metricsToken).body
		for _, want := range []string{`id="replicas"`, "<strong>replica-a</strong> (this one)", "replica-b", "beta", "gamma", "alpha"} {
			if !strings.Contains(html, want) {
				t.Errorf("replica-a's HTML lacks %q", want)
			}
		}

		db := openDB(t, dsn)
		// A write touches its replica's row only.
		other := time.Now().Add(-5 * time.Second).UnixMilli()
		exec(t, db, `INSERT INTO mcprel_status_replicas (replica, updated_at, upstreams) VALUES (?, ?, ?)`, "other", other, `{"upstreams":[]}`)
		// Another process given replica-a's name writes its row; the
		// last writer wins.
		exec(t, db, `UPDATE mcprel_status_replicas SET upstreams = ? WHERE replica = ?`,
			`{"upstreams":[{"name":"impostor","state":"down","circuit":"open","in_flight":0}]}`, "replica-a")
		if err := host.PublishReplica(a); err != nil {
			t.Fatal(err)
		}
		if at, ups, ok := rowOf(t, db, "other"); !ok || at != other || ups != `{"upstreams":[]}` {
			t.Errorf("another replica's row changed: %v %d %s", ok, at, ups)
		}
		if _, ups, ok := rowOf(t, db, "replica-a"); !ok || strings.Contains(ups, "impostor") || !strings.Contains(ups, "alpha") {
			t.Errorf("replica-a's row after its write: %v %s", ok, ups)
		}
		exec(t, db, `DELETE FROM mcprel_status_replicas WHERE replica = ?`, "other")

		// A replica that stops gracefully is listed no more.
		stopB()
		bStopped = true
		if _, _, ok := rowOf(t, db, "replica-b"); ok {
			t.Errorf("replica-b stopped and left its row")
		}
		if got := names(replicasOf(t, a)); len(got) != 1 || got[0] != "replica-a" {
			t.Errorf("after replica-b stopped, replica-a lists %v", got)
		}

		// A row not written for a minute is a replica that stopped
		// without saying so: not shown, and deleted.
		exec(t, db, `INSERT INTO mcprel_status_replicas (replica, updated_at, upstreams) VALUES (?, ?, ?)`,
			"ghost", time.Now().Add(-61*time.Second).UnixMilli(), `{"upstreams":[{"name":"old","state":"connected","circuit":"closed","in_flight":0}]}`)
		if got := names(replicasOf(t, a)); len(got) != 1 || got[0] != "replica-a" {
			t.Errorf("with a stale row, replica-a lists %v", got)
		}
		if err := host.PublishReplica(a); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := rowOf(t, db, "ghost"); ok {
			t.Errorf("the stale row was not deleted")
		}
		stopA()
		stopped = true
		if _, _, ok := rowOf(t, db, "replica-a"); ok {
			t.Errorf("replica-a stopped and left its row")
		}
	})
}

// A replica with a thousand upstreams writes a bounded row that says how
// many it left out, and the page lists a bounded number of them.
func TestReplicaRowBounded(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		var ups []status.ReplicaUpstream
		for i := range 1000 {
			ups = append(ups, status.ReplicaUpstream{Name: fmt.Sprintf("upstream-%04d-%s", i, strings.Repeat("x", 80)),
				State: "connected", Circuit: "closed", InFlight: i})
		}
		rt := newReplica(t, dsn, "big", ups)
		_, stop := running(t, rt)
		defer stop()
		if err := host.PublishReplica(rt); err != nil {
			t.Fatal(err)
		}
		_, raw, ok := rowOf(t, openDB(t, dsn), "big")
		if !ok || len(raw) > host.MaxReplicaBytes {
			t.Fatalf("the row: %v, %d bytes", ok, len(raw))
		}
		var row struct {
			Upstreams []status.ReplicaUpstream `json:"upstreams"`
			More      int                      `json:"more"`
		}
		if err := json.Unmarshal([]byte(raw), &row); err != nil {
			t.Fatal(err)
		}
		if len(row.Upstreams) == 0 || row.More == 0 || len(row.Upstreams)+row.More != 1000 || row.Upstreams[0].Name != ups[0].Name {
			t.Fatalf("the row keeps %d upstreams and counts %d more", len(row.Upstreams), row.More)
		}
		s := replicasOf(t, rt)
		if len(s.Replicas) != 1 {
			t.Fatalf("lists %v", names(s))
		}
		r := s.Replicas[0]
		if len(r.Upstreams) != status.MaxReplicaUpstreams || r.MoreUpstreams != 1000-status.MaxReplicaUpstreams {
			t.Errorf("the page lists %d upstreams and counts %d more", len(r.Upstreams), r.MoreUpstreams)
		}
	})
}

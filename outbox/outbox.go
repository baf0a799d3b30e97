// Package outbox is mcprel's transactional outbox: an effect beyond the
// database — a payment provider's API, a deployment, an e-mail — recorded
// as an intent in the transaction that claims its idempotency key, and
// delivered after that transaction commits, with a key the receiver
// deduplicates by.
//
// The ledger makes an effect exactly-once only where the effect is a row
// in its own database: the key's claim, the effect and the result commit
// together. A call to someone else cannot join that transaction. An
// intent can: Put writes it through the keyed call's transaction, so the
// intent commits with the ledger record or not at all, and a replay of the
// key never writes a second one. The Dispatcher then delivers it — again
// and again if it must, after a crash, from any process that shares the
// store — always with the same key (DeliveryKey: derived from the tenant,
// the tool and the caller's key, so two tenants' "k1" never meet at the
// receiver). A receiver that honours keys applies it once however many
// times it is delivered: exactly once, end to end.
//
// An intent is pending (Pending) until the receiver acknowledges it
// (Delivered, with its answer) or refuses it for good (Failed, with its
// answer); in between, its attempts and the time of the next one are
// recorded. Every transition is conditional on the state it comes from
// and the lease it holds, so that two dispatchers — two replicas, or one
// whose lease was taken over — never both end one intent.
//
// Pending intents are bounded, per tenant and in all (Options): Put
// refuses past the bound with *FullError, a retryable refusal.
//
// The package knows only store: the policy that gives a keyed tool's
// handler an outbox lives above the server (package delivery).
package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/store"
)

// Defaults of Options.
const (
	DefaultMaxPendingPerTenant = 1000
	DefaultMaxPending          = 10000
	DefaultRetention           = 24 * time.Hour
	DefaultGiveUpAfter         = 24 * time.Hour
	// MaxRequestBytes bounds one intent's request.
	MaxRequestBytes = 1 << 20
	// MaxAnswerBytes bounds the receiver's answer an intent keeps.
	MaxAnswerBytes = 64 << 10
)

// Options configure an Outbox. The zero value is valid.
type Options struct {
	// MaxPendingPerTenant and MaxPending bound the intents not yet
	// delivered nor failed: one tenant's, and all tenants' together.
	MaxPendingPerTenant, MaxPending int
	// Retention is how long an intent is kept once it ended (delivered
	// or failed), for lookups; the reaper deletes it after.
	Retention time.Duration
	// GiveUpAfter is how long an intent may stay pending — its receiver
	// down all that while — before it is ended failed, undelivered.
	GiveUpAfter time.Duration
}

// Outbox is the intents' store.
type Outbox struct {
	db     *store.DB
	opts   Options
	shards int
	next   atomic.Uint32 // the shard the next intent's counts start at
	now    func() time.Time

	// beforeWrite, set only by tests, runs inside a transition's write
	// transaction between its read and its write (see export_test.go).
	beforeWrite func(op string)
}

// State is where an intent is in its life.
type State uint8

const (
	// Pending: recorded, not yet acknowledged or refused.
	Pending State = 1
	// Delivered: the receiver acknowledged it; its answer is kept.
	Delivered State = 2
	// Failed: the receiver refused it for good, or it stayed
	// undeliverable past Options.GiveUpAfter; the answer says which.
	Failed State = 3
)

// String returns "pending", "delivered" or "failed".
func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Delivered:
		return "delivered"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Intent is what a keyed call hands to the outbox: the receiver (Target,
// a name the Dispatcher knows) and the request to deliver it, for the
// operation the call's key identifies.
type Intent struct {
	Tenant, Tool string
	// Key is the call's idempotency key; "" for a call without one, whose
	// intent is then an operation of its own (its id is the key).
	Key     string
	Target  string
	Request json.RawMessage
}

// Operation is an intent as the outbox holds it.
type Operation struct {
	// ID names the operation: what the tool's result gives its caller.
	ID           string
	Tenant, Tool string
	Key, Target  string
	// DeliveryKey is the key every delivery carries (DeliveryKey).
	DeliveryKey string
	Request     json.RawMessage
	State       State
	// Attempts counts the deliveries begun.
	Attempts int
	// NextAttempt is when a pending intent is next delivered.
	NextAttempt time.Time
	// Answer is the receiver's last answer (see Answer), as JSON.
	Answer    json.RawMessage
	CreatedAt time.Time
	EndedAt   time.Time // zero while pending

	owner      string
	leaseUntil time.Time
	shards     [2]int // the tenant's and the total count's shard it is counted in
}

// FullError refuses an intent past a bound on pending intents. Nothing
// was recorded; room comes back as intents are delivered, so the caller
// answers it as a retryable overload.
type FullError struct {
	Tenant string // whose bound was reached, unless All
	All    bool
	Limit  int
}

func (e *FullError) Error() string {
	if e.All {
		return fmt.Sprintf("outbox: %d intents are pending in all, as many as it holds (MaxPending)", e.Limit)
	}
	return fmt.Sprintf("outbox: %d intents of this tenant are pending, as many as it holds (MaxPendingPerTenant)", e.Limit)
}

// PendingError refuses an intent whose key and target an earlier
// operation's intent, still pending, holds: the ledger let the key be
// reused (its record's retention ended) before the outbox delivered it.
// It is temporary: retry once that intent is delivered or fails.
type PendingError struct{ ID string }

func (e *PendingError) Error() string {
	return fmt.Sprintf("outbox: an earlier operation with this key (%s) is still being delivered", e.ID)
}

// Errors.
var (
	ErrNotFound = errors.New("outbox: no such operation")
	// ErrLeaseLost: the dispatcher's lease on an intent expired and
	// another took it, or the intent ended without it; nothing was
	// written.
	ErrLeaseLost = errors.New("outbox: the intent's lease was lost")
)

var migrations = []store.Migration{{
	Version: 1,
	SQLite: `CREATE TABLE mcprel_outbox (
		id           TEXT PRIMARY KEY,
		tenant       TEXT NOT NULL,
		tool         TEXT NOT NULL,
		idem_key     TEXT NOT NULL,
		target       TEXT NOT NULL,
		delivery_key TEXT NOT NULL,
		request      TEXT NOT NULL,
		state        INTEGER NOT NULL,
		attempts     INTEGER NOT NULL DEFAULT 0,
		next_at      INTEGER NOT NULL,
		owner        TEXT,
		lease_until  INTEGER,
		answer       TEXT,
		created_at   INTEGER NOT NULL,
		ended_at     INTEGER,
		tenant_shard INTEGER NOT NULL,
		total_shard  INTEGER NOT NULL,
		UNIQUE (tenant, tool, idem_key, target));
		CREATE INDEX mcprel_outbox_due ON mcprel_outbox (next_at) WHERE state = 1;
		CREATE INDEX mcprel_outbox_ended ON mcprel_outbox (ended_at) WHERE state > 1;
		CREATE TABLE mcprel_outbox_counts (scope TEXT NOT NULL, shard INTEGER NOT NULL, n INTEGER NOT NULL,
			PRIMARY KEY (scope, shard));
		CREATE TABLE mcprel_outbox_dispatcher (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, lease_until INTEGER NOT NULL)`,
	Postgres: `CREATE TABLE mcprel_outbox (
		id           TEXT PRIMARY KEY,
		tenant       TEXT NOT NULL,
		tool         TEXT NOT NULL,
		idem_key     TEXT NOT NULL,
		target       TEXT NOT NULL,
		delivery_key TEXT NOT NULL,
		request      TEXT NOT NULL,
		state        SMALLINT NOT NULL,
		attempts     INTEGER NOT NULL DEFAULT 0,
		next_at      BIGINT NOT NULL,
		owner        TEXT,
		lease_until  BIGINT,
		answer       TEXT,
		created_at   BIGINT NOT NULL,
		ended_at     BIGINT,
		tenant_shard INTEGER NOT NULL,
		total_shard  INTEGER NOT NULL,
		UNIQUE (tenant, tool, idem_key, target));
		CREATE INDEX mcprel_outbox_due ON mcprel_outbox (next_at) WHERE state = 1;
		CREATE INDEX mcprel_outbox_ended ON mcprel_outbox (ended_at) WHERE state > 1;
		CREATE TABLE mcprel_outbox_counts (scope TEXT NOT NULL, shard INTEGER NOT NULL, n BIGINT NOT NULL,
			PRIMARY KEY (scope, shard));
		CREATE TABLE mcprel_outbox_dispatcher (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, lease_until BIGINT NOT NULL)`,
}}

// Open prepares the outbox's schema in db and returns it. opts may be nil.
func Open(ctx context.Context, db *store.DB, opts *Options) (*Outbox, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxPendingPerTenant < 0 || o.MaxPending < 0 || o.Retention < 0 || o.GiveUpAfter < 0 {
		return nil, errors.New("outbox: negative options are errors, not \"unlimited\"")
	}
	if o.MaxPendingPerTenant == 0 {
		o.MaxPendingPerTenant = DefaultMaxPendingPerTenant
	}
	if o.MaxPending == 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.GiveUpAfter == 0 {
		o.GiveUpAfter = DefaultGiveUpAfter
	}
	if err := db.Migrate(ctx, "outbox", migrations); err != nil {
		return nil, err
	}
	ob := &Outbox{db: db, opts: o, shards: 1, now: time.Now}
	if db.Dialect() == store.Postgres {
		// Concurrent creators count in shards of their own, and never
		// wait for one another's commits on one hot row.
		ob.shards = 8
	}
	return ob, nil
}

// DB is the store the outbox lives in.
func (o *Outbox) DB() *store.DB { return o.db }

// DeliveryKey is the key every delivery of an operation carries: derived
// from the tenant, the tool, the caller's key and the receiver, so that
// it is the same on every delivery of one operation and differs between
// tenants (and tools) that chose the same key (ledger.DerivedKey).
func DeliveryKey(tenant, tool, key, target string) string {
	return ledger.DerivedKey(tenant, tool, key, target)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// barrier runs the test hook for op, if one is set.
func (o *Outbox) barrier(op string) {
	if o.beforeWrite != nil {
		o.beforeWrite(op)
	}
}

// Put records in into tx, the keyed call's transaction: it commits with
// the ledger record or not at all, and a replay of the key, which runs
// nothing, writes none. Past a bound on pending intents Put returns a
// *FullError, and while an earlier operation's intent under the same key
// and target is still pending a *PendingError; either writes nothing.
func (o *Outbox) Put(ctx context.Context, tx *store.Tx, in Intent) (Operation, error) {
	if tx == nil {
		return Operation{}, errors.New("outbox: an intent is recorded in the keyed call's transaction, and there is none")
	}
	if tx.DB() != o.db {
		return Operation{}, errors.New("outbox: the transaction is not in the outbox's store: the intent and its key would commit apart")
	}
	if in.Target == "" || in.Tool == "" {
		return Operation{}, errors.New("outbox: an intent needs its tool and its target")
	}
	if !json.Valid(in.Request) || len(in.Request) > MaxRequestBytes {
		return Operation{}, fmt.Errorf("outbox: an intent's request must be JSON of at most %d bytes", MaxRequestBytes)
	}
	id := "op_" + strings.ToLower(rand.Text())
	key := in.Key
	if key == "" {
		key = id // an operation of its own
	}
	// The key's intent for this target from an earlier operation: the
	// ledger reuses a key once its record's retention ended, and the
	// outbox keeps an ended intent a while after. Ended, it gives way; a
	// pending one is still to be delivered under the same delivery key,
	// and the new operation must wait for it.
	prior, err := scanOperation(tx.QueryRow(ctx, selectOperation+`WHERE tenant = ? AND tool = ? AND idem_key = ? AND target = ?`,
		in.Tenant, in.Tool, key, in.Target))
	switch {
	case err == nil && prior.State == Pending:
		return Operation{}, &PendingError{ID: prior.ID}
	case err == nil:
		if _, err := tx.Exec(ctx, `DELETE FROM mcprel_outbox WHERE id = ? AND state > ?`, prior.ID, int(Pending)); err != nil {
			return Operation{}, err
		}
	case !errors.Is(err, ErrNotFound):
		return Operation{}, err
	}
	start := int(o.next.Add(1) % uint32(o.shards))
	tenantShard, err := o.countIn(ctx, tx, "t:"+in.Tenant, o.opts.MaxPendingPerTenant, start)
	if err != nil {
		return Operation{}, err
	}
	if tenantShard < 0 {
		return Operation{}, &FullError{Tenant: in.Tenant, Limit: o.opts.MaxPendingPerTenant}
	}
	totalShard, err := o.countIn(ctx, tx, "*", o.opts.MaxPending, start)
	if err != nil {
		return Operation{}, err
	}
	if totalShard < 0 {
		return Operation{}, &FullError{All: true, Limit: o.opts.MaxPending}
	}
	now := time.UnixMilli(ms(o.now()))
	op := Operation{ID: id, Tenant: in.Tenant, Tool: in.Tool, Key: key, Target: in.Target,
		DeliveryKey: DeliveryKey(in.Tenant, in.Tool, key, in.Target), Request: append(json.RawMessage(nil), in.Request...),
		State: Pending, NextAttempt: now, CreatedAt: now, shards: [2]int{tenantShard, totalShard}}
	_, err = tx.Exec(ctx, `INSERT INTO mcprel_outbox
		(id, tenant, tool, idem_key, target, delivery_key, request, state, attempts, next_at, created_at, tenant_shard, total_shard)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)`,
		op.ID, op.Tenant, op.Tool, op.Key, op.Target, op.DeliveryKey, string(op.Request), int(Pending), ms(now), ms(now), tenantShard, totalShard)
	if err != nil {
		return Operation{}, err
	}
	return op, nil
}

// countIn counts one pending intent into one shard of scope's count
// within limit, trying the shards in turn from start, and returns the
// shard, or -1 when every shard holds its share. A shard's row is made at
// zero the first time it is needed. The UPDATE is guarded by the share,
// so that the shards' sum never passes limit, and locks the row only when
// it counts in it: a creator moving on from a full shard holds nothing.
func (o *Outbox) countIn(ctx context.Context, tx *store.Tx, scope string, limit, start int) (int, error) {
	for i := range o.shards {
		shard := (start + i) % o.shards
		share := limit / o.shards
		if shard < limit%o.shards {
			share++
		}
		if share == 0 {
			continue
		}
		for made := false; ; made = true {
			res, err := tx.Exec(ctx, `UPDATE mcprel_outbox_counts SET n = n + 1 WHERE scope = ? AND shard = ? AND n < ?`, scope, shard, share)
			if err != nil {
				return -1, err
			}
			if n, err := res.RowsAffected(); err != nil || n == 1 {
				return shard, err
			}
			if made {
				break // full
			}
			if _, err := tx.Exec(ctx, `INSERT INTO mcprel_outbox_counts (scope, shard, n) VALUES (?, ?, 0) ON CONFLICT DO NOTHING`, scope, shard); err != nil {
				return -1, err
			}
		}
	}
	return -1, nil
}

// countOut takes an intent that leaves Pending out of its shards.
func countOut(ctx context.Context, tx *store.Tx, op Operation) error {
	for i, scope := range []string{"t:" + op.Tenant, "*"} {
		if _, err := tx.Exec(ctx, `UPDATE mcprel_outbox_counts SET n = n - 1 WHERE scope = ? AND shard = ?`, scope, op.shards[i]); err != nil {
			return err
		}
	}
	return nil
}

const selectOperation = `SELECT ` + operationColumns + ` FROM mcprel_outbox `

func scanOperation(row interface{ Scan(...any) error }) (Operation, error) {
	var op Operation
	var state int
	var next, created int64
	var owner, answer sql.NullString
	var lease, ended sql.NullInt64
	var request string
	err := row.Scan(&op.ID, &op.Tenant, &op.Tool, &op.Key, &op.Target, &op.DeliveryKey, &request, &state, &op.Attempts,
		&next, &owner, &lease, &answer, &created, &ended, &op.shards[0], &op.shards[1])
	if errors.Is(err, sql.ErrNoRows) {
		return Operation{}, ErrNotFound
	}
	if err != nil {
		return Operation{}, err
	}
	op.Request, op.State = json.RawMessage(request), State(state)
	op.NextAttempt, op.CreatedAt = time.UnixMilli(next), time.UnixMilli(created)
	op.owner = owner.String
	if lease.Valid {
		op.leaseUntil = time.UnixMilli(lease.Int64)
	}
	if answer.Valid {
		op.Answer = json.RawMessage(answer.String)
	}
	if ended.Valid {
		op.EndedAt = time.UnixMilli(ended.Int64)
	}
	return op, nil
}

// Get returns a tenant's operation by its id; another tenant's is not
// found.
func (o *Outbox) Get(ctx context.Context, tenant, id string) (Operation, error) {
	return scanOperation(o.db.QueryRow(ctx, selectOperation+`WHERE id = ? AND tenant = ?`, id, tenant))
}

// Lookup returns the operations the keyed call (tenant, tool, key)
// recorded, one per target: what a retry of the key, or an operator
// reconciling it, is shown.
func (o *Outbox) Lookup(ctx context.Context, tenant, tool, key string) ([]Operation, error) {
	var out []Operation
	err := o.db.ReadTx(ctx, func(tx *store.Tx) (err error) {
		out, err = queryOperations(ctx, tx, selectOperation+`WHERE tenant = ? AND tool = ? AND idem_key = ? ORDER BY target`, tenant, tool, key)
		return err
	})
	return out, err
}

// queryOperations runs a query of operationColumns and returns every row
// it finds, its rows closed before it returns, so the transaction can go
// on to write.
func queryOperations(ctx context.Context, tx *store.Tx, query string, args ...any) ([]Operation, error) {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Operation
	for rows.Next() {
		op, err := scanOperation(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, op)
	}
	return out, rows.Err()
}

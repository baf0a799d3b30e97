// Package ledger makes a mutation run at most once per idempotency key,
// whatever the retries, races, lost responses, restarts and replicas.
//
// A mutation is identified by its scope — tenant and tool — and the key the
// client chose; its fingerprint records what the operation was. The ledger
// stores the key, the fingerprint and the committed result, and Do runs the
// business effect inside the same database transaction as the key claim,
// the execution record and the stored result: one atomic unit. So a key is
// either absent (nothing happened) or committed with its effect and result;
// a crash at any point leaves one or the other, never an effect without its
// record or a record without its effect.
//
//   - First call: the effect runs, everything commits, the result returns.
//   - Same key, same fingerprint: the stored result returns, rebuilt from
//     the stored JSON and marked Replayed; nothing runs.
//   - Same key, different fingerprint: *ConflictError; nothing runs.
//   - A duplicate racing the first waits for it to commit (bounded by its
//     context) and then replays.
//
// The JSON-RPC id correlates messages; it is never the key. A process-local
// map is not a ledger: records live in the store, shared by processes and
// replicas.
//
// Effects outside the database (a payment provider, another service) cannot
// share its transaction. Claim gives them two phases instead — claim the
// key with a lease and commit, run the effect, store the result and commit
// — which is only safe if the external service accepts the same key (pass
// it on) or an outbox in the database bridges to it: the ledger then
// guarantees one completed claim, not one external call.
package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcprel/mcprel/store"
)

// MinRetryAfter is the shortest wait an *InProgressError advises, unless
// the holder's deadline or lease is nearer.
const MinRetryAfter = 100 * time.Millisecond

// Defaults for Options fields left at zero.
const (
	DefaultRetention = 24 * time.Hour
	DefaultLease     = 30 * time.Second
	// MaxKeyLength bounds an idempotency key, in bytes.
	MaxKeyLength = 255
)

// Options configure a Ledger. The zero value is valid.
type Options struct {
	// Retention is how long a record is kept after it is created; a key
	// used again after that is a new operation. Zero means
	// DefaultRetention (24 h).
	Retention time.Duration
	// Lease is how long a two-phase claim holds its key before another
	// caller may take it over. Zero means DefaultLease.
	Lease time.Duration
	// Observers are told of every operation and its transaction (see
	// Observer).
	Observers []Observer
	// Now is the ledger's clock: leases, retention and the ages of claims
	// are read from it. Nil means time.Now. Tests move it to go past a
	// lease or a retention without waiting for one.
	Now func() time.Time
}

// Ledger is the idempotency ledger on a store.
type Ledger struct {
	db        *store.DB
	retention time.Duration
	lease     time.Duration
	now       func() time.Time // Options.Now
	observers []Observer
	recent    *recentKeys          // SQLite: keys this process saw recorded
	onRoute   func(readFirst bool) // tests: told whether a call is read first
	onScanned func()               // tests: called when Reap has read a chunk, before it deletes
}

// State is where a record is in its life.
type State uint8

const (
	// InProgress: a two-phase claim holds the key; the effect may be
	// running elsewhere.
	InProgress State = 1
	// Committed: the operation finished and its result is stored.
	Committed State = 2
	// OutcomeUnknown: a claim at most once (ClaimOnce) whose effect may
	// have happened and whose answer was never stored — the request may
	// have reached a receiver that does not honour the key, and its
	// answer was lost, or its holder died. The ledger never lets the key
	// run again: every later claim gets *UnknownError until an operator
	// who checked closes the record (Resolve, Forget), or its retention
	// ends — a full retention after it became unknown; then the key is a
	// new operation, as any expired key is.
	OutcomeUnknown State = 3
)

// String returns "in_progress", "committed" or "outcome_unknown".
func (s State) String() string {
	switch s {
	case InProgress:
		return "in_progress"
	case Committed:
		return "committed"
	case OutcomeUnknown:
		return "outcome_unknown"
	}
	return "unknown"
}

// Op identifies one mutation.
type Op struct {
	Tenant      string
	Tool        string
	Key         string
	Fingerprint Fingerprint
}

// Result is the outcome of an operation.
type Result struct {
	// Data is the stored result, a copy no one else holds.
	Data json.RawMessage
	// Replayed is set when nothing ran: the result was committed before.
	Replayed bool
	// ExecutedAt is when the effect committed.
	ExecutedAt time.Time
	// Executions counts the times the effect was started for this key:
	// 1, unless a two-phase claim on it was taken over after its lease
	// expired, which counts again.
	Executions int
}

// Record is what the ledger holds about a key, for reconciliation.
type Record struct {
	Op
	State      State
	Result     json.RawMessage
	CreatedAt  time.Time
	ExecutedAt time.Time // zero while in progress
	ExpiresAt  time.Time
	LeaseUntil time.Time // two-phase claims in progress
	// ClaimedAt is when the claim in progress was taken (a takeover
	// starts it again), and Deadline when its holder must have answered:
	// its context's deadline, zero if it had none. A duplicate is told
	// to retry by them (InProgressError).
	ClaimedAt  time.Time
	Deadline   time.Time
	Executions int

	leaseToken string
}

// ConflictError reports a key already used for a different operation.
type ConflictError struct{ Tenant, Tool, Key string }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("ledger: idempotency key %q was already used for a different %s operation", e.Key, e.Tool)
}

// InProgressError reports a key held by an operation that has not finished:
// retry after RetryAfter with the same key.
//
// RetryAfter follows the holder: it is as long as the holder has run so
// far, so that a retry comes back when the call will have run twice as
// long — a call just begun is asked about again soon, a long one less
// often — and at least MinRetryAfter; but never past the holder's deadline
// (Record.Deadline), by when it must have answered, nor past its lease,
// when the key is decided without it.
type InProgressError struct{ RetryAfter time.Duration }

func (e *InProgressError) Error() string {
	return fmt.Sprintf("ledger: the operation for this key is still in progress; retry after %v", e.RetryAfter)
}

// UnknownError reports a key whose operation has an unknown outcome
// (OutcomeUnknown): it may have taken effect, and nothing was run again.
type UnknownError struct {
	// Reason says why the outcome is unknown, as its claim recorded it.
	Reason string
	// Since is when it became unknown.
	Since time.Time
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("ledger: the outcome of the operation with this key is unknown (%s): it may have taken effect, and it is not run again", e.Reason)
}

// Errors.
var (
	ErrNotFound   = errors.New("ledger: no record for this key")
	ErrInvalidKey = errors.New("ledger: an idempotency key must be 1 to 255 bytes of printable text")
	// ErrLeaseLost: a two-phase claim no longer holds its key — its lease
	// expired and another caller took the key over or made its outcome
	// unknown, or an operator resolved it — so nothing this claim stores
	// or releases is kept. Claim.Outcome reads what the key records.
	ErrLeaseLost = errors.New("ledger: the claim's lease expired and the key was taken over")
	// ErrNotUnknown: Resolve or Forget found the key's record, but not
	// with an unknown outcome — committed, or held by a live claim — and
	// left it as it was.
	ErrNotUnknown = errors.New("ledger: the key's operation does not have an unknown outcome")
)

// storable reports whether s is text every store can hold: valid UTF-8
// without a NUL.
func storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// ValidKey reports whether key is acceptable: 1 to MaxKeyLength bytes, no
// control characters.
func ValidKey(key string) bool {
	if key == "" || len(key) > MaxKeyLength {
		return false
	}
	for _, r := range key {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return false
		}
	}
	return true
}

var migrations = []store.Migration{{
	Version: 1,
	SQLite: `CREATE TABLE mcprel_ledger (
		tenant      TEXT NOT NULL,
		tool        TEXT NOT NULL,
		idem_key    TEXT NOT NULL,
		fingerprint BLOB NOT NULL,
		state       INTEGER NOT NULL,
		result      TEXT,
		created_at  INTEGER NOT NULL,
		executed_at INTEGER,
		expires_at  INTEGER NOT NULL,
		lease_until INTEGER,
		lease_token TEXT,
		executions  INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (tenant, tool, idem_key)) WITHOUT ROWID;
		CREATE INDEX mcprel_ledger_expires ON mcprel_ledger (expires_at)`,
	Postgres: `CREATE TABLE mcprel_ledger (
		tenant      TEXT NOT NULL,
		tool        TEXT NOT NULL,
		idem_key    TEXT NOT NULL,
		fingerprint BYTEA NOT NULL,
		state       SMALLINT NOT NULL,
		result      TEXT,
		created_at  BIGINT NOT NULL,
		executed_at BIGINT,
		expires_at  BIGINT NOT NULL,
		lease_until BIGINT,
		lease_token TEXT,
		executions  INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (tenant, tool, idem_key));
		CREATE INDEX mcprel_ledger_expires ON mcprel_ledger (expires_at)`,
}, {
	// On SQLite the expiry index cost every keyed operation a page more
	// in its commit — about a tenth of a lone writer's rate — to spare
	// the reaper a read of the records, which it does instead, paced and
	// in read transactions (see RunReaper). PostgreSQL keeps it.
	Version:  2,
	SQLite:   `DROP INDEX IF EXISTS mcprel_ledger_expires`,
	Postgres: `SELECT 1`,
}, {
	// When a claim was taken and its holder's deadline, by which a
	// duplicate is told when to come back (retryAfter). NULL in a
	// record written before: its age is read from created_at.
	Version: 3,
	SQL: `ALTER TABLE mcprel_ledger ADD COLUMN claimed_at BIGINT;
		ALTER TABLE mcprel_ledger ADD COLUMN holder_deadline BIGINT`,
}, {
	// The unknown outcomes, newest first, for "mcprel ledger list" and
	// the gauge of them: partial, so that the keyed operations, which
	// never have an unknown outcome or have it rarely, write no more
	// pages than before.
	Version: 4,
	SQL: `CREATE INDEX mcprel_ledger_unknown ON mcprel_ledger (executed_at, tenant, tool, idem_key, expires_at)
		WHERE state = 3`,
}}

// Open prepares the ledger's schema in db and returns the ledger. opts may
// be nil.
func Open(ctx context.Context, db *store.DB, opts *Options) (*Ledger, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Retention < 0 || o.Lease < 0 {
		return nil, errors.New("ledger: Options durations must not be negative")
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Retention < o.Lease {
		return nil, errors.New("ledger: Options.Retention must be at least the Lease, or a live claim could expire")
	}
	if err := db.Migrate(ctx, "ledger", migrations); err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Ledger{db: db, retention: o.Retention, lease: o.Lease, now: o.Now, observers: o.Observers}
	if db.Dialect() == store.SQLite {
		l.recent = newRecentKeys()
	}
	return l, nil
}

// Lease is how long a two-phase claim holds its key.
func (l *Ledger) Lease() time.Duration { return l.lease }

// DB returns the store the ledger lives in, whose transactions effects
// write through.
func (l *Ledger) DB() *store.DB { return l.db }

func ms(t time.Time) int64 { return t.UnixMilli() }

// msOrNull is t in milliseconds, or NULL for the zero time.
func msOrNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return ms(t)
}

func fromMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64)
}

// Do runs effect at most once for op, inside the transaction that claims
// the key and stores what effect returns, and returns the result. effect
// writes its business rows through tx; whatever it returns (a success or a
// business failure, as JSON) is committed with them. An error from effect
// rolls everything back and stores nothing, so the key stays free.
func (l *Ledger) Do(ctx context.Context, op Op, effect func(ctx context.Context, tx *store.Tx) (json.RawMessage, error)) (_ Result, err error) {
	ctx, end := l.observe(ctx, "do")
	defer func() { end(err) }()
	if !ValidKey(op.Key) {
		return Result{}, ErrInvalidKey
	}
	sqlite := l.db.Dialect() == store.SQLite
	// On SQLite most duplicates arrive after the first call committed:
	// while writers are queued, answer them with a read, which never
	// queues behind them. Only a key this process saw recorded is read
	// first: a fresh key, the usual case, would pay a read that finds
	// nothing (as much CPU as its write, since a read connection rereads
	// what the writer changed), and a duplicate of a key recorded
	// elsewhere is answered by the write path all the same, only later. A
	// lone writer skips the read: with no queue to wait in, its write
	// transaction finds a duplicate for one statement more (the claim
	// that takes nothing, then the read). PostgreSQL writers do not
	// queue, and the extra round trip would cost every fresh key more
	// than it saves a replay.
	if sqlite && l.db.WriterBusy() {
		readFirst := l.recent.maybe(op)
		if l.onRoute != nil {
			l.onRoute(readFirst)
		}
		if readFirst {
			if res, ok, err := l.peek(ctx, op); ok || err != nil {
				return res, waitBounded(ctx, err)
			}
		}
	}
	var out Result
	// Concurrent operations share a group commit on SQLite, each in its
	// own savepoint: one fsync for many keys.
	//
	// The key is claimed first, by an insert that reports whether it took
	// the key, and the record's result is stored after the effect. On
	// SQLite, where the write transaction excludes other writers anyway,
	// a SELECT of the key before one insert of the whole record writes
	// the same pages but costs more CPU: a query goes through
	// database/sql's rows, a statement does not. In BenchmarkEightWriters
	// the claim first made 1.12× the operations (median of 8 paired
	// runs); a lone writer the same.
	err = l.db.WriteBatched(ctx, func(tx *store.Tx) error {
		now := l.now()
		rec, err := l.claimKey(ctx, tx, op, Committed, now, "", time.Time{})
		switch {
		case err != nil:
			return err
		case rec != nil && rec.State == Committed:
			out = replay(rec)
			return nil
		case rec != nil && rec.State == OutcomeUnknown:
			return unknownOf(rec)
		case rec != nil:
			return &InProgressError{RetryAfter: retryAfter(rec, now)}
		}
		data, err := effect(ctx, tx)
		if err != nil {
			return err
		}
		if !json.Valid(data) {
			return fmt.Errorf("ledger: the effect's result is not JSON")
		}
		if _, err := tx.Exec(ctx, `UPDATE mcprel_ledger SET result = ?, executed_at = ?
			WHERE tenant = ? AND tool = ? AND idem_key = ?`, string(data), ms(now), op.Tenant, op.Tool, op.Key); err != nil {
			return err
		}
		out = Result{Data: append(json.RawMessage(nil), data...), ExecutedAt: time.UnixMilli(ms(now)), Executions: 1}
		return nil
	})
	var conflict *ConflictError
	if err == nil || errors.As(err, &conflict) {
		l.recent.add(op) // a duplicate now has a record to be answered from
	}
	if err != nil {
		return Result{}, waitBounded(ctx, err)
	}
	return out, nil
}

// peek replays a committed record, or reports a conflict, without a write
// transaction. ok is false when the write path must decide.
func (l *Ledger) peek(ctx context.Context, op Op) (res Result, ok bool, err error) {
	rec, err := scanRecord(l.db.QueryRow(ctx, selectRecord+keyIs, op.Tenant, op.Tool, op.Key))
	switch {
	case errors.Is(err, ErrNotFound):
		return Result{}, false, nil
	case err != nil:
		return Result{}, false, err
	case rec.State != Committed || !rec.ExpiresAt.After(l.now()):
		return Result{}, false, nil
	case rec.Fingerprint != op.Fingerprint:
		return Result{}, true, &ConflictError{Tenant: op.Tenant, Tool: op.Tool, Key: op.Key}
	}
	return replay(rec), true, nil
}

// waitBounded turns a call whose context ended before the ledger could
// answer — typically while a duplicate waited for the first writer to
// commit — into "in progress": retrying with the same key is always safe,
// and it either replays or runs once.
func waitBounded(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var conflict *ConflictError
	var busy *InProgressError
	var unknown *UnknownError
	if ctx.Err() != nil && !errors.As(err, &conflict) && !errors.As(err, &busy) && !errors.As(err, &unknown) {
		return errors.Join(&InProgressError{RetryAfter: time.Second}, err)
	}
	return err
}

// claimKey takes the key for op: it inserts a fresh record, or replaces
// one whose retention ended, in a single statement, so that two callers
// racing on an expired key cannot both take it (a DELETE then INSERT
// could). It returns nil when op now holds the key, or the live record
// that holds it; a record with another fingerprint is a *ConflictError.
// A claim (state InProgress) records its token, its lease, when it was
// taken and its holder's deadline (zero: none).
func (l *Ledger) claimKey(ctx context.Context, tx *store.Tx, op Op, state State, now time.Time, token string, deadline time.Time) (*Record, error) {
	var leaseUntil, leaseToken, claimedAt any
	if state == InProgress {
		leaseUntil, leaseToken, claimedAt = ms(now.Add(l.lease)), token, ms(now)
	}
	for attempt := 0; ; attempt++ {
		res, err := tx.Exec(ctx, `INSERT INTO mcprel_ledger
			(tenant, tool, idem_key, fingerprint, state, created_at, expires_at, lease_until, lease_token, claimed_at, holder_deadline, executions)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)
			ON CONFLICT (tenant, tool, idem_key) DO UPDATE SET
				fingerprint = excluded.fingerprint, state = excluded.state, result = NULL,
				created_at = excluded.created_at, executed_at = NULL, expires_at = excluded.expires_at,
				lease_until = excluded.lease_until, lease_token = excluded.lease_token,
				claimed_at = excluded.claimed_at, holder_deadline = excluded.holder_deadline, executions = 1
			WHERE mcprel_ledger.expires_at <= ?`,
			op.Tenant, op.Tool, op.Key, op.Fingerprint[:], int(state), ms(now), ms(now.Add(l.retention)), leaseUntil, leaseToken, claimedAt, msOrNull(deadline), ms(now))
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return nil, err
		}
		rec, err := scanRecord(tx.QueryRow(ctx, selectRecord+keyIs, op.Tenant, op.Tool, op.Key))
		if errors.Is(err, ErrNotFound) && attempt == 0 {
			continue // reaped between the two statements: the key is free
		}
		if err != nil {
			return nil, err
		}
		if rec.Fingerprint != op.Fingerprint {
			return nil, &ConflictError{Tenant: op.Tenant, Tool: op.Tool, Key: op.Key}
		}
		return rec, nil
	}
}

const (
	recordColumns = `tenant, tool, idem_key, fingerprint, state, result, created_at, executed_at, expires_at, lease_until, lease_token, claimed_at, holder_deadline, executions`
	selectRecord  = `SELECT ` + recordColumns + ` FROM mcprel_ledger`
	keyIs         = ` WHERE tenant = ? AND tool = ? AND idem_key = ?`
)

// scanRecord reads one ledger row.
func scanRecord(row interface{ Scan(...any) error }) (*Record, error) {
	var rec Record
	var fp []byte
	var state int
	var result sql.NullString
	var created, expires int64
	var executed, lease, claimed, deadline sql.NullInt64
	var token sql.NullString
	err := row.Scan(&rec.Tenant, &rec.Tool, &rec.Key, &fp, &state, &result, &created, &executed, &expires, &lease, &token, &claimed, &deadline, &rec.Executions)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	copy(rec.Fingerprint[:], fp)
	rec.State = State(state)
	if result.Valid {
		rec.Result = json.RawMessage(result.String)
	}
	rec.CreatedAt, rec.ExpiresAt = time.UnixMilli(created), time.UnixMilli(expires)
	rec.ExecutedAt, rec.LeaseUntil = fromMS(executed), fromMS(lease)
	rec.ClaimedAt, rec.Deadline = fromMS(claimed), fromMS(deadline)
	rec.leaseToken = token.String
	return &rec, nil
}

// unknownOf is the UnknownError a record with an unknown outcome reads
// as.
func unknownOf(rec *Record) *UnknownError {
	return &UnknownError{Reason: cmp.Or(rec.UnknownReason(), "no reason was recorded"), Since: rec.ExecutedAt}
}

// UnknownReason is why the outcome of a record in state OutcomeUnknown is
// unknown, as it was recorded; empty when nothing was (or the record's
// outcome is known: its Result is then the operation's).
func (rec *Record) UnknownReason() string {
	if rec.State != OutcomeUnknown {
		return ""
	}
	var why struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(rec.Result, &why)
	return why.Reason
}

// retryAfter is how long a duplicate of the claim in progress in rec is
// told to wait, at now (see InProgressError): as long as the claim has
// run, at least MinRetryAfter, and no longer than its holder's deadline
// or its lease has left. Once the holder's deadline has passed it is
// settling its answer, and a duplicate is asked back after MinRetryAfter.
func retryAfter(rec *Record, now time.Time) time.Duration {
	since := rec.ClaimedAt
	if since.IsZero() { // recorded before claims kept when they began
		since = rec.CreatedAt
	}
	end := rec.LeaseUntil
	if !rec.Deadline.IsZero() && rec.Deadline.Before(end) {
		end = rec.Deadline
	}
	left := end.Sub(now)
	if left <= 0 {
		return MinRetryAfter
	}
	return min(max(now.Sub(since), MinRetryAfter), left)
}

func replay(rec *Record) Result {
	return Result{Data: append(json.RawMessage(nil), rec.Result...), Replayed: true, ExecutedAt: rec.ExecutedAt, Executions: rec.Executions}
}

// Lookup returns the record of a key in its scope, for reconciliation: a
// response lost after the commit is recovered by key, never by running the
// operation again. A key of another tenant is not found.
func (l *Ledger) Lookup(ctx context.Context, tenant, tool, key string) (_ Record, err error) {
	ctx, end := l.observe(ctx, "lookup")
	defer func() { end(err) }()
	// Reached from the wire (a reconciling tool): text no record can
	// hold is answered here, not with PostgreSQL's refusal of a NUL.
	if !ValidKey(key) {
		return Record{}, ErrInvalidKey
	}
	if !storable(tenant) || !storable(tool) {
		return Record{}, ErrNotFound
	}
	rec, err := scanRecord(l.db.QueryRow(ctx, selectRecord+keyIs, tenant, tool, key))
	if err != nil {
		return Record{}, err
	}
	if !rec.ExpiresAt.After(l.now()) {
		return Record{}, ErrNotFound
	}
	return *rec, nil
}

// Reap deletes up to batch records whose retention ended before now and
// returns how many it deleted. Small batches keep each write transaction
// short. On SQLite, which keeps no index of expiry times, it reads the
// records in key order to find them (in read transactions no writer waits
// for), from the first until it has found batch or read them all.
func (l *Ledger) Reap(ctx context.Context, now time.Time, batch int) (int, error) {
	if l.db.Dialect() == store.SQLite {
		deleted := 0
		var from *recordKey
		for deleted < batch {
			page, err := l.scanExpired(ctx, from, reapChunk, batch-deleted, now)
			if err != nil {
				return deleted, err
			}
			if l.onScanned != nil {
				l.onScanned()
			}
			n, err := l.deleteExpired(ctx, page.expired, now)
			deleted += n
			if err != nil || page.next == nil {
				return deleted, err
			}
			from = page.next
		}
		return deleted, nil
	}
	var n int64
	err := l.db.WriteTx(ctx, func(tx *store.Tx) error {
		// The outer condition is checked again against a row a racing
		// takeover renewed while this waited for its lock; the subquery's
		// is not: without it, a record renewed after the subquery read it
		// would be deleted, and its key run again.
		q := `DELETE FROM mcprel_ledger WHERE (tenant, tool, idem_key) IN
			(SELECT tenant, tool, idem_key FROM mcprel_ledger WHERE expires_at <= ? LIMIT ?) AND expires_at <= ?`
		res, err := tx.Exec(ctx, q, ms(now), batch, ms(now))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// RunReaper removes expired records every interval, in batches of batch
// (at least 1), until ctx ends.
//
// On SQLite each tick reads on from where the last one stopped, as many
// records as lets it go through them all in a quarter of the retention
// (and at least reapMinVisit), so that reading costs each record about
// four visits over its life, and a record is gone at most a quarter of the
// retention after it expired — from the second pass on: the first, not
// knowing the ledger's size yet, reads reapMinVisit a tick. A small ledger
// is read through every tick.
func (l *Ledger) RunReaper(ctx context.Context, every time.Duration, batch int) {
	batch = max(batch, 1)
	t := time.NewTicker(every)
	defer t.Stop()
	var sweep reapSweep
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if l.db.Dialect() == store.SQLite {
				l.sweep(ctx, &sweep, every, batch)
				continue
			}
			for {
				n, err := l.Reap(ctx, l.now(), batch)
				if err != nil || n < batch || ctx.Err() != nil {
					break
				}
			}
		}
	}
}

// Tests make these small.
var (
	// reapChunk bounds the records one read of the reaper visits.
	reapChunk = 1000
	// reapMinVisit is the fewest records a tick of the reaper reads.
	reapMinVisit = 10_000
)

// recordKey is a record's primary key, where a sweep goes on from.
type recordKey struct{ tenant, tool, key string }

// reapSweep is where RunReaper's pass through the records stands.
type reapSweep struct {
	from      *recordKey // nil: from the first record
	visited   int        // records read in this pass so far
	lastTotal int        // records the previous full pass read
}

// sweep reads on through the records for one tick and deletes those
// expired.
func (l *Ledger) sweep(ctx context.Context, s *reapSweep, every time.Duration, batch int) {
	budget := sweepBudget(s.lastTotal, every, l.retention)
	for budget > 0 && ctx.Err() == nil {
		now := l.now()
		page, err := l.scanExpired(ctx, s.from, min(reapChunk, budget), batch, now)
		if err != nil {
			return
		}
		if _, err := l.deleteExpired(ctx, page.expired, now); err != nil {
			return
		}
		budget -= page.visited
		s.visited += page.visited
		s.from = page.next
		if page.next == nil { // through: the next tick starts again
			s.lastTotal, s.visited = s.visited, 0
			return
		}
	}
}

// sweepBudget is how many records a tick of every reads, of a ledger of
// total records kept for retention: enough to read them all in a quarter
// of the retention, and at least reapMinVisit. In floating point: records
// × 4 × a tick in nanoseconds overflows an int64 from about 40 million
// records.
func sweepBudget(total int, every, retention time.Duration) int {
	return max(reapMinVisit, int(math.Ceil(float64(total)*4*float64(every)/float64(retention))))
}

// expiredPage is what one read of the reaper found.
type expiredPage struct {
	expired []recordKey
	visited int
	next    *recordKey // where to go on from; nil at the end of the records
}

// scanExpired reads up to visit records in key order after from (from the
// first when from is nil) and returns the keys of up to want of them whose
// retention ended by now.
func (l *Ledger) scanExpired(ctx context.Context, from *recordKey, visit, want int, now time.Time) (expiredPage, error) {
	var page expiredPage
	err := l.db.ReadTx(ctx, func(tx *store.Tx) error {
		q, args := `SELECT tenant, tool, idem_key, expires_at FROM mcprel_ledger`, []any{}
		if from != nil {
			q += ` WHERE (tenant, tool, idem_key) > (?, ?, ?)`
			args = append(args, from.tenant, from.tool, from.key)
		}
		rows, err := tx.Query(ctx, q+` ORDER BY tenant, tool, idem_key LIMIT ?`, append(args, visit)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		var last recordKey
		for rows.Next() {
			var k recordKey
			var expires int64
			if err := rows.Scan(&k.tenant, &k.tool, &k.key, &expires); err != nil {
				return err
			}
			page.visited++
			last = k
			if expires <= ms(now) {
				page.expired = append(page.expired, k)
				if len(page.expired) == want {
					break
				}
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if page.visited == visit || len(page.expired) == want {
			page.next = &last
		}
		return nil
	})
	return page, err
}

// deleteExpired deletes the records of keys that are still expired at now
// (one claimed again since it was read is kept), in one write transaction.
func (l *Ledger) deleteExpired(ctx context.Context, keys []recordKey, now time.Time) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	var n int64
	err := l.db.WriteTx(ctx, func(tx *store.Tx) error {
		for _, k := range keys {
			res, err := tx.Exec(ctx, `DELETE FROM mcprel_ledger WHERE tenant = ? AND tool = ? AND idem_key = ? AND expires_at <= ?`,
				k.tenant, k.tool, k.key, ms(now))
			if err != nil {
				return err
			}
			d, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += d
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

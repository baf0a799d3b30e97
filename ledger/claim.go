package ledger

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"time"

	"github.com/mcprel/mcprel/store"
)

// Claim is a key held in two phases, for an effect outside the database.
// The claim is committed before the effect runs; Complete stores the result
// in a second commit, and Release gives the key back if the effect did not
// happen. While the lease lasts, duplicates get *InProgressError; Extend
// renews it for an effect that runs longer.
//
// What happens to a claim whose holder died depends on how it was taken.
// Claim: another caller takes the key over when the lease expires (and
// runs the effect again), so pass the key to the external service, which
// must treat it as its own idempotency key — or write an outbox row in the
// database instead. ClaimOnce: for a receiver that does not honour the
// key, the key is never run again; its outcome becomes unknown.
type Claim struct {
	l     *Ledger
	op    Op
	token string
	until time.Time
	once  bool
	// Executions counts the claims taken on this key, this one included:
	// more than 1 means an earlier claim expired without completing.
	Executions int
}

// Claim takes the key for op. It returns the committed result instead
// (replay non-nil, claim nil) when the operation already finished,
// *ConflictError for a key used by a different operation, and
// *InProgressError while another caller's lease holds the key. A claim
// whose lease expired is taken over, and so is a key whose outcome is
// unknown (OutcomeUnknown): the receiver honours the key, so running the
// effect again with it is safe.
//
// ctx's deadline, if it has one, is recorded as the holder's: by then its
// effect must have ended, and a duplicate is never told to come back
// later than that (InProgressError). Give Claim the context the effect
// runs under, or one with the effect's deadline.
func (l *Ledger) Claim(ctx context.Context, op Op) (claim *Claim, replayed *Result, err error) {
	ctx, end := l.observe(ctx, "claim")
	defer func() { end(err) }()
	return l.claim(ctx, op, false)
}

// ClaimOnce takes the key for op at most once, for an effect whose
// receiver does not honour the key (an MCP server without idempotency,
// behind a gateway): a key that was claimed is never handed out again.
// It answers as Claim does, except that where Claim would take over — the
// earlier claim's lease expired, its holder presumably dead — the record
// becomes OutcomeUnknown, and that and every later claim of the key get
// *UnknownError. The holder marks the outcome unknown itself (Unknown)
// when the effect may have happened and its answer was lost.
func (l *Ledger) ClaimOnce(ctx context.Context, op Op) (claim *Claim, replayed *Result, err error) {
	ctx, end := l.observe(ctx, "claim_once")
	defer func() { end(err) }()
	return l.claim(ctx, op, true)
}

func (l *Ledger) claim(ctx context.Context, op Op, once bool) (claim *Claim, replayed *Result, err error) {
	if !ValidKey(op.Key) {
		return nil, nil, ErrInvalidKey
	}
	// A retry of a finished operation — the usual reason a claimed key
	// comes back — is answered with a read, which takes no write
	// transaction: on PostgreSQL the write path would lock the row and
	// commit durably, on SQLite queue behind every writer. A fresh key
	// pays one read more before its claim's commit — on SQLite only when
	// this process saw its key recorded (see Do), which the write path
	// answers the same way, later.
	readFirst := l.recent == nil || l.recent.maybe(op)
	if l.onRoute != nil {
		l.onRoute(readFirst)
	}
	if readFirst {
		if res, ok, err := l.peekClaim(ctx, op, once); ok || err != nil {
			return nil, res, waitBounded(ctx, err)
		}
	}
	token := rand.Text()
	deadline, _ := ctx.Deadline()
	var madeUnknown *UnknownError // committed, then returned
	err = l.db.WriteBatched(ctx, func(tx *store.Tx) error {
		madeUnknown = nil
		now := l.now()
		rec, err := l.claimKey(ctx, tx, op, InProgress, now, token, deadline)
		switch {
		case err != nil:
			return err
		case rec == nil:
			claim = &Claim{l: l, op: op, token: token, until: now.Add(l.lease), once: once, Executions: 1}
			return nil
		case rec.State == Committed:
			r := replay(rec)
			replayed = &r
			return nil
		case rec.State == OutcomeUnknown && once:
			return unknownOf(rec)
		case rec.State == InProgress && rec.LeaseUntil.After(now):
			return &InProgressError{RetryAfter: retryAfter(rec, now)}
		case once:
			// The lease expired: whoever held it may have crashed with the
			// request sent. The key is never handed out again.
			data, _ := json.Marshal(map[string]string{"reason": "the claim's holder stopped before it recorded an answer (its lease expired)"})
			res, err := tx.Exec(ctx, `UPDATE mcprel_ledger SET state = ?, result = ?, executed_at = ?, lease_until = NULL, lease_token = NULL,
					expires_at = CASE WHEN expires_at < ? THEN ? ELSE expires_at END
				WHERE tenant = ? AND tool = ? AND idem_key = ? AND state = ? AND lease_token = ? AND lease_until <= ?`,
				int(OutcomeUnknown), string(data), ms(now), ms(now.Add(l.retention)), ms(now.Add(l.retention)),
				op.Tenant, op.Tool, op.Key, int(InProgress), rec.leaseToken, ms(now))
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				// Another caller decided the key a moment ago.
				return &InProgressError{RetryAfter: MinRetryAfter}
			}
			rec.State, rec.Result, rec.ExecutedAt = OutcomeUnknown, data, time.UnixMilli(ms(now))
			madeUnknown = unknownOf(rec) // an error here would roll the change back
			return nil
		}
		// The lease expired (whoever held it may have crashed), or the
		// outcome is unknown: the receiver honours the key, so take over.
		res, err := tx.Exec(ctx, `UPDATE mcprel_ledger SET state = ?, result = NULL, executed_at = NULL, lease_token = ?, lease_until = ?,
				claimed_at = ?, holder_deadline = ?, executions = executions + 1
			WHERE tenant = ? AND tool = ? AND idem_key = ? AND state = ? AND `+sameToken+` AND (lease_until IS NULL OR lease_until <= ?)`,
			int(InProgress), token, ms(now.Add(l.lease)), ms(now), msOrNull(deadline), op.Tenant, op.Tool, op.Key, int(rec.State), rec.leaseToken, ms(now))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			// Another caller took the key over a moment ago.
			return &InProgressError{RetryAfter: MinRetryAfter}
		}
		claim = &Claim{l: l, op: op, token: token, until: now.Add(l.lease), once: once, Executions: rec.Executions + 1}
		return nil
	})
	var conflict *ConflictError
	var busy *InProgressError
	if err == nil || errors.As(err, &conflict) || errors.As(err, &busy) {
		l.recent.add(op) // a duplicate now has a record to be answered from
	}
	if err != nil {
		return nil, nil, waitBounded(ctx, err)
	}
	if madeUnknown != nil {
		return nil, nil, madeUnknown
	}
	return claim, replayed, nil
}

// peekClaim answers a claim from a read when the record decides it
// without a write: a committed result is replayed, a record of another
// operation is a conflict, a live lease is in progress and, for a claim
// at most once, an unknown outcome stays unknown. ok is false when only
// the write path can decide: the key is free, its retention ended, its
// lease expired (a takeover, or its outcome made unknown, is a write), or
// a claim that may take over finds its outcome unknown.
func (l *Ledger) peekClaim(ctx context.Context, op Op, once bool) (replayed *Result, ok bool, err error) {
	rec, err := scanRecord(l.db.QueryRow(ctx, selectRecord+keyIs, op.Tenant, op.Tool, op.Key))
	now := l.now()
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case !rec.ExpiresAt.After(now):
		return nil, false, nil
	case rec.Fingerprint != op.Fingerprint:
		return nil, true, &ConflictError{Tenant: op.Tenant, Tool: op.Tool, Key: op.Key}
	case rec.State == Committed:
		r := replay(rec)
		return &r, true, nil
	case rec.State == OutcomeUnknown && once:
		return nil, true, unknownOf(rec)
	case rec.State == InProgress && rec.LeaseUntil.After(now):
		return nil, true, &InProgressError{RetryAfter: retryAfter(rec, now)}
	}
	return nil, false, nil
}

// sameToken matches the lease token a record was read with, NULL (an
// unknown outcome holds none) included.
const sameToken = `COALESCE(lease_token, '') = ?`

// Key returns the idempotency key, to pass to the external service.
func (c *Claim) Key() string { return c.op.Key }

// LeaseUntil is when the claim stops protecting the key.
func (c *Claim) LeaseUntil() time.Time { return c.until }

// Complete stores the effect's result and commits the operation. It fails
// with ErrLeaseLost if the lease expired and another caller took the key.
func (c *Claim) Complete(ctx context.Context, data json.RawMessage) (_ Result, err error) {
	ctx, end := c.l.observe(ctx, "complete")
	defer func() { end(err) }()
	if !json.Valid(data) {
		return Result{}, errors.New("ledger: the result is not JSON")
	}
	now := c.l.now()
	err = c.held(ctx, `state = ?, result = ?, executed_at = ?, lease_until = NULL, lease_token = NULL`, int(Committed), string(data), ms(now))
	if err != nil {
		return Result{}, err
	}
	return Result{Data: append(json.RawMessage(nil), data...), ExecutedAt: time.UnixMilli(ms(now)), Executions: c.Executions}, nil
}

// Extend renews the claim's lease from now, for an effect still running
// as the lease nears its end: a holder that keeps extending is alive, and
// a duplicate keeps getting *InProgressError. It fails with ErrLeaseLost
// if the lease had already expired and the key was taken over or its
// outcome made unknown.
func (c *Claim) Extend(ctx context.Context) (err error) {
	ctx, end := c.l.observe(ctx, "extend")
	defer func() { end(err) }()
	until := c.l.now().Add(c.l.lease)
	// A claim renewed past the record's retention keeps its record: it
	// is kept a retention beyond the lease, never reaped or reused while
	// held.
	keep := ms(until.Add(c.l.retention))
	if err := c.held(ctx, `lease_until = ?, expires_at = CASE WHEN expires_at < ? THEN ? ELSE expires_at END`, ms(until), keep, keep); err != nil {
		return err
	}
	c.until = until
	return nil
}

// Unknown records that the claim's effect may have happened and that its
// answer was lost (reason says how: the connection broke with the request
// sent, a deadline fired, the caller cancelled): the key's outcome is
// unknown, and a claim at most once (ClaimOnce) never runs it again. It
// fails with ErrLeaseLost if the claim no longer holds the key.
func (c *Claim) Unknown(ctx context.Context, reason string) (err error) {
	ctx, end := c.l.observe(ctx, "unknown")
	defer func() { end(err) }()
	data, _ := json.Marshal(map[string]string{"reason": reason})
	now := c.l.now()
	keep := ms(now.Add(c.l.retention)) // an unknown outcome is kept a full retention from when it became unknown
	return c.held(ctx, `state = ?, result = ?, executed_at = ?, lease_until = NULL, lease_token = NULL, expires_at = CASE WHEN expires_at < ? THEN ? ELSE expires_at END`,
		int(OutcomeUnknown), string(data), ms(now), keep, keep)
}

// held updates the claim's record with set (and its args) if the claim
// still holds the key: in progress under its lease token.
func (c *Claim) held(ctx context.Context, set string, args ...any) error {
	return c.l.db.WriteBatched(ctx, func(tx *store.Tx) error {
		args := append(args, c.op.Tenant, c.op.Tool, c.op.Key, int(InProgress), c.token)
		res, err := tx.Exec(ctx, `UPDATE mcprel_ledger SET `+set+`
			WHERE tenant = ? AND tool = ? AND idem_key = ? AND state = ? AND lease_token = ?`, args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ErrLeaseLost
		}
		return nil
	})
}

// Outcome reads what the ledger records for the claim's key, for a holder
// whose claim was lost while its effect ran (Complete, Unknown or Release
// failed with ErrLeaseLost: its lease ran out, and the key was taken
// over, made unknown or resolved). Whoever answers the holder's caller
// answers with this, as a retry with the key is answered, never with what
// the holder's own effect returned: a key has one outcome. It is the
// committed result, marked Replayed; *UnknownError; *InProgressError while
// a claim holds the key; *ConflictError if the key now records another
// operation; or ErrNotFound when nothing records an outcome for the key
// (a later holder released it, an operator forgot it, its retention
// ended).
func (c *Claim) Outcome(ctx context.Context) (_ Result, err error) {
	ctx, end := c.l.observe(ctx, "outcome")
	defer func() { end(err) }()
	rec, err := scanRecord(c.l.db.QueryRow(ctx, selectRecord+keyIs, c.op.Tenant, c.op.Tool, c.op.Key))
	now := c.l.now()
	switch {
	case err != nil:
		return Result{}, err
	case !rec.ExpiresAt.After(now):
		return Result{}, ErrNotFound
	case rec.Fingerprint != c.op.Fingerprint:
		return Result{}, &ConflictError{Tenant: c.op.Tenant, Tool: c.op.Tool, Key: c.op.Key}
	case rec.State == Committed:
		return replay(rec), nil
	case rec.State == OutcomeUnknown:
		return Result{}, unknownOf(rec)
	}
	return Result{}, &InProgressError{RetryAfter: retryAfter(rec, now)}
}

// Release gives the key back: the effect did not happen, and the next
// caller with this key starts afresh. It fails with ErrLeaseLost, and
// changes nothing, if the claim no longer holds the key: the key's record
// is then another's (see Outcome), and its holder's failure is not the
// key's answer.
func (c *Claim) Release(ctx context.Context) (err error) {
	ctx, end := c.l.observe(ctx, "release")
	defer func() { end(err) }()
	return c.l.db.WriteBatched(ctx, func(tx *store.Tx) error {
		res, err := tx.Exec(ctx, `DELETE FROM mcprel_ledger WHERE tenant = ? AND tool = ? AND idem_key = ? AND state = ? AND lease_token = ?`,
			c.op.Tenant, c.op.Tool, c.op.Key, int(InProgress), c.token)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ErrLeaseLost
		}
		return nil
	})
}

// closable is the condition under which an operator may close a record:
// its outcome is unknown, or its claim's lease expired with its holder
// gone (the outcome is as unknown, only no caller has come back to find
// out), and its retention has not ended.
const closable = ` AND (state = ? OR (state = ? AND lease_until <= ?)) AND expires_at > ?`

// Resolve closes an operation whose outcome was unknown with the result
// an operator found it had (result, a tool result as JSON): the record is
// committed, and a retry with the key is answered with it. Only a record
// with an unknown outcome, or a claim whose lease expired, is changed —
// in one conditional statement, so that a caller taking the key at that
// moment and the operator cannot both win; anything else is
// ErrNotUnknown, and a key with no record ErrNotFound.
func (l *Ledger) Resolve(ctx context.Context, tenant, tool, key string, result json.RawMessage) (err error) {
	ctx, end := l.observe(ctx, "resolve")
	defer func() { end(err) }()
	if !json.Valid(result) {
		return errors.New("ledger: the result is not JSON")
	}
	now := l.now()
	return l.close(ctx, tenant, tool, key, now, `UPDATE mcprel_ledger SET state = ?, result = ?, executed_at = ?, lease_until = NULL, lease_token = NULL
		WHERE tenant = ? AND tool = ? AND idem_key = ?`+closable,
		int(Committed), string(result), ms(now), tenant, tool, key, int(OutcomeUnknown), int(InProgress), ms(now), ms(now))
}

// Forget removes an operation whose outcome is unknown, for an operator
// who found it never took effect: the key is free, and the next call with
// it runs. Only a record of unknown outcome is removed — not a claim whose
// lease expired, whose holder may be alive and only slow to renew: a
// later claim makes that one unknown first.
func (l *Ledger) Forget(ctx context.Context, tenant, tool, key string) (err error) {
	ctx, end := l.observe(ctx, "forget")
	defer func() { end(err) }()
	now := l.now()
	return l.close(ctx, tenant, tool, key, now, `DELETE FROM mcprel_ledger WHERE tenant = ? AND tool = ? AND idem_key = ? AND state = ? AND expires_at > ?`,
		tenant, tool, key, int(OutcomeUnknown), ms(now))
}

func (l *Ledger) close(ctx context.Context, tenant, tool, key string, now time.Time, stmt string, args ...any) error {
	if !ValidKey(key) {
		return ErrInvalidKey
	}
	if !storable(tenant) || !storable(tool) {
		return ErrNotFound
	}
	return l.db.WriteBatched(ctx, func(tx *store.Tx) error {
		res, err := tx.Exec(ctx, stmt, args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		rec, err := scanRecord(tx.QueryRow(ctx, selectRecord+keyIs, tenant, tool, key))
		switch {
		case err != nil:
			return err
		case !rec.ExpiresAt.After(now):
			return ErrNotFound
		}
		return ErrNotUnknown
	})
}

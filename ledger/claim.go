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
// happen. While the lease lasts, duplicates get *InProgressError; after it,
// another caller may take the key over (and run the effect again), so pass
// the key to the external service, which must treat it as its own
// idempotency key — or write an outbox row in the database instead.
type Claim struct {
	l     *Ledger
	op    Op
	token string
	until time.Time
	// Executions counts the claims taken on this key, this one included:
	// more than 1 means an earlier claim expired without completing.
	Executions int
}

// Claim takes the key for op. It returns the committed result instead
// (replay non-nil, claim nil) when the operation already finished,
// *ConflictError for a key used by a different operation, and
// *InProgressError while another caller's lease holds the key.
func (l *Ledger) Claim(ctx context.Context, op Op) (claim *Claim, replayed *Result, err error) {
	ctx, end := l.observe(ctx, "claim")
	defer func() { end(err) }()
	if !ValidKey(op.Key) {
		return nil, nil, ErrInvalidKey
	}
	token := rand.Text()
	err = l.db.WriteBatched(ctx, func(tx *store.Tx) error {
		now := l.now()
		rec, err := l.claimKey(ctx, tx, op, InProgress, now, token)
		switch {
		case err != nil:
			return err
		case rec == nil:
			claim = &Claim{l: l, op: op, token: token, until: now.Add(l.lease), Executions: 1}
			return nil
		case rec.State == Committed:
			r := replay(rec)
			replayed = &r
			return nil
		case rec.LeaseUntil.After(now):
			return &InProgressError{RetryAfter: rec.LeaseUntil.Sub(now)}
		}
		// The lease expired: whoever held it may have crashed. Take over.
		res, err := tx.Exec(ctx, `UPDATE mcprel_ledger SET lease_token = ?, lease_until = ?, executions = executions + 1
			WHERE tenant = ? AND tool = ? AND idem_key = ? AND state = ? AND lease_token = ?`,
			token, ms(now.Add(l.lease)), op.Tenant, op.Tool, op.Key, int(InProgress), rec.leaseToken)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return &InProgressError{RetryAfter: l.lease}
		}
		claim = &Claim{l: l, op: op, token: token, until: now.Add(l.lease), Executions: rec.Executions + 1}
		return nil
	})
	if err != nil {
		return nil, nil, waitBounded(ctx, err)
	}
	return claim, replayed, nil
}

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
	err = c.l.db.WriteBatched(ctx, func(tx *store.Tx) error {
		res, err := tx.Exec(ctx, `UPDATE mcprel_ledger SET state = ?, result = ?, executed_at = ?, lease_until = NULL, lease_token = NULL
			WHERE tenant = ? AND tool = ? AND idem_key = ? AND state = ? AND lease_token = ?`,
			int(Committed), string(data), ms(now), c.op.Tenant, c.op.Tool, c.op.Key, int(InProgress), c.token)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ErrLeaseLost
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Data: append(json.RawMessage(nil), data...), ExecutedAt: time.UnixMilli(ms(now)), Executions: c.Executions}, nil
}

// Release gives the key back: the effect did not happen, and the next
// caller with this key starts afresh.
func (c *Claim) Release(ctx context.Context) (err error) {
	ctx, end := c.l.observe(ctx, "release")
	defer func() { end(err) }()
	return c.l.db.WriteBatched(ctx, func(tx *store.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM mcprel_ledger WHERE tenant = ? AND tool = ? AND idem_key = ? AND state = ? AND lease_token = ?`,
			c.op.Tenant, c.op.Tool, c.op.Key, int(InProgress), c.token)
		return err
	})
}

package outbox

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mcprel/mcprel/store"
)

// Claim gives owner up to limit due intents — pending, their next attempt
// due, held by no live lease — each leased to owner until lease from now
// and its attempt counted. On PostgreSQL replicas claim with FOR UPDATE
// SKIP LOCKED: two never claim one intent, and none waits for another's
// claim. On SQLite, whose writers take turns, the claim's write
// transaction excludes every other.
func (o *Outbox) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]Operation, error) {
	var out []Operation
	err := o.db.WriteTx(ctx, func(tx *store.Tx) error {
		now := o.now()
		due := `SELECT id FROM mcprel_outbox WHERE state = ? AND next_at <= ? AND (lease_until IS NULL OR lease_until <= ?)
			ORDER BY next_at LIMIT ?`
		if o.db.Dialect() == store.Postgres {
			due += ` FOR UPDATE SKIP LOCKED`
		}
		o.barrier("claim")
		// The due rows are chosen once (a materialized CTE): PostgreSQL
		// may otherwise scan a LIMIT subquery of an IN again per row, and
		// SKIP LOCKED would then hand it more rows each time.
		var err error
		out, err = queryOperations(ctx, tx, `WITH due AS MATERIALIZED (`+due+`)
			UPDATE mcprel_outbox SET owner = ?, lease_until = ?, attempts = attempts + 1
			WHERE id IN (SELECT id FROM due) AND state = ? AND (lease_until IS NULL OR lease_until <= ?)
			RETURNING `+operationColumns,
			int(Pending), ms(now), ms(now), limit, owner, ms(now.Add(lease)), int(Pending), ms(now))
		return err
	})
	if err != nil {
		// Not one of them is claimed unless the transaction committed.
		return nil, err
	}
	return out, nil
}

// Answer is what a receiver made of one delivery.
type Answer struct {
	// Verdict is Acknowledged, Refused or Retry.
	Verdict Verdict `json:"-"`
	// Status is the receiver's status (an HTTP status), 0 for none.
	Status int `json:"status,omitempty"`
	// Body is what it answered, as it answered it (clipped at
	// MaxAnswerBytes): JSON, or a JSON string of text.
	Body json.RawMessage `json:"body,omitempty"`
	// Error is why no answer came (the connection failed, a timeout).
	Error string `json:"error,omitempty"`
	// RetryAfter is how long the receiver asked the sender to wait
	// (Retry-After), for Retry.
	RetryAfter time.Duration `json:"-"`
}

// Verdict is what an answer means for the intent.
type Verdict uint8

const (
	// Retry: the receiver did not take it now (down, busy, rate
	// limited, no answer): it is delivered again later, with the same
	// key.
	Retry Verdict = iota
	// Acknowledged: the receiver applied it, or says it already had.
	Acknowledged
	// Refused: the receiver refused it for good; it is never retried.
	Refused
)

// Deliver records how owner's delivery of op ended, in one write
// transaction conditional on owner still holding op's lease and op
// still pending: Acknowledged ends it delivered, Refused ends it failed,
// Retry leaves it pending until next. It returns ErrLeaseLost when the
// lease was lost (another dispatcher took op, or it ended), and writes
// nothing then.
func (o *Outbox) Deliver(ctx context.Context, op Operation, owner string, a Answer, next time.Time) error {
	answer, _ := json.Marshal(a)
	return o.db.WriteBatched(ctx, func(tx *store.Tx) error {
		now := o.now()
		held, err := o.held(ctx, tx, op.ID, owner, now)
		if err != nil {
			return err
		}
		o.barrier("deliver")
		guard := ` WHERE id = ? AND state = ? AND owner = ? AND lease_until = ?`
		args := []any{op.ID, int(Pending), owner, ms(held.leaseUntil)}
		if a.Verdict == Retry {
			return applied(tx.Exec(ctx, `UPDATE mcprel_outbox SET next_at = ?, owner = NULL, lease_until = NULL, answer = ?`+guard,
				append([]any{ms(next), string(answer)}, args...)...))
		}
		state := Delivered
		if a.Verdict == Refused {
			state = Failed
		}
		if err := applied(tx.Exec(ctx, `UPDATE mcprel_outbox SET state = ?, owner = NULL, lease_until = NULL, answer = ?, ended_at = ?`+guard,
			append([]any{int(state), string(answer), ms(now)}, args...)...)); err != nil {
			return err
		}
		return countOut(ctx, tx, held)
	})
}

// Renew extends owner's lease on op from now, for a delivery that runs
// long. ErrLeaseLost when owner no longer holds it.
func (o *Outbox) Renew(ctx context.Context, op Operation, owner string, lease time.Duration) error {
	return o.db.WriteBatched(ctx, func(tx *store.Tx) error {
		now := o.now()
		held, err := o.held(ctx, tx, op.ID, owner, now)
		if err != nil {
			return err
		}
		o.barrier("renew")
		return applied(tx.Exec(ctx, `UPDATE mcprel_outbox SET lease_until = ? WHERE id = ? AND state = ? AND owner = ? AND lease_until = ?`,
			ms(now.Add(lease)), op.ID, int(Pending), owner, ms(held.leaseUntil)))
	})
}

// held reads an intent owner holds under a live lease.
func (o *Outbox) held(ctx context.Context, tx *store.Tx, id, owner string, now time.Time) (Operation, error) {
	op, err := scanOperation(tx.QueryRow(ctx, selectOperation+`WHERE id = ?`, id))
	if err != nil {
		return Operation{}, err
	}
	if op.State != Pending || op.owner != owner || !op.leaseUntil.After(now) {
		return Operation{}, ErrLeaseLost
	}
	return op, nil
}

// applied checks that a guarded write changed its one row.
func applied(res interface{ RowsAffected() (int64, error) }, err error) error {
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err != nil {
			return err
		}
		return ErrLeaseLost
	}
	return nil
}

// GiveUp ends failed the intents pending since before the GiveUpAfter
// bound, undelivered (up to limit), and returns how many. A delivery in
// flight (leased) is left to end first.
func (o *Outbox) GiveUp(ctx context.Context, limit int) (int, error) {
	n := 0
	err := o.db.WriteTx(ctx, func(tx *store.Tx) error {
		n = 0
		now := o.now()
		stale, err := queryOperations(ctx, tx, selectOperation+`WHERE state = ? AND created_at <= ? AND (lease_until IS NULL OR lease_until <= ?) LIMIT ?`,
			int(Pending), ms(now.Add(-o.opts.GiveUpAfter)), ms(now), limit)
		if err != nil {
			return err
		}
		answer, _ := json.Marshal(Answer{Error: "undelivered: the receiver did not take it within " + o.opts.GiveUpAfter.String()})
		for _, op := range stale {
			res, err := tx.Exec(ctx, `UPDATE mcprel_outbox SET state = ?, answer = ?, ended_at = ?, owner = NULL, lease_until = NULL
				WHERE id = ? AND state = ? AND (lease_until IS NULL OR lease_until <= ?)`, int(Failed), string(answer), ms(now), op.ID, int(Pending), ms(now))
			if err != nil {
				return err
			}
			if k, _ := res.RowsAffected(); k == 1 {
				if err := countOut(ctx, tx, op); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	return n, err
}

// Reap deletes up to batch intents that ended longer than the retention
// ago, and returns how many.
func (o *Outbox) Reap(ctx context.Context, batch int) (int, error) {
	var n int64
	err := o.db.WriteTx(ctx, func(tx *store.Tx) error {
		res, err := tx.Exec(ctx, `DELETE FROM mcprel_outbox WHERE id IN
			(SELECT id FROM mcprel_outbox WHERE state > ? AND ended_at <= ? LIMIT ?)`, int(Pending), ms(o.now().Add(-o.opts.Retention)), batch)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// Release gives up owner's leases: on the intents it claimed and did not
// record an answer for, and on the store's dispatch lease. A dispatcher
// that stops in order calls it once its deliveries have ended, so that
// the next one — another replica, or this process restarted — delivers
// at once rather than after the leases expire. The intents are delivered
// again, with the same key.
func (o *Outbox) Release(ctx context.Context, owner string) error {
	return o.db.WriteTx(ctx, func(tx *store.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE mcprel_outbox SET owner = NULL, lease_until = NULL WHERE state = ? AND owner = ?`, int(Pending), owner); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM mcprel_outbox_dispatcher WHERE owner = ?`, owner)
		return err
	})
}

// HoldDispatch takes or renews the store-wide dispatch lease for owner,
// until lease from now, and reports whether owner holds it: on SQLite one
// dispatcher per file delivers, and the others stand by until its lease
// expires. (PostgreSQL replicas each deliver, claiming intents apart.)
func (o *Outbox) HoldDispatch(ctx context.Context, owner string, lease time.Duration) (bool, error) {
	held := false
	err := o.db.WriteTx(ctx, func(tx *store.Tx) error {
		now := o.now()
		res, err := tx.Exec(ctx, `INSERT INTO mcprel_outbox_dispatcher (id, owner, lease_until) VALUES (1, ?, ?)
			ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, lease_until = excluded.lease_until
			WHERE mcprel_outbox_dispatcher.owner = excluded.owner OR mcprel_outbox_dispatcher.lease_until <= ?`,
			owner, ms(now.Add(lease)), ms(now))
		if err != nil {
			return err
		}
		k, err := res.RowsAffected()
		held = k == 1
		return err
	})
	return held, err
}

const operationColumns = `id, tenant, tool, idem_key, target, delivery_key, request, state, attempts, next_at, owner, lease_until,
	answer, created_at, ended_at, tenant_shard, total_shard`

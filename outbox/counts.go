package outbox

import (
	"context"

	"github.com/mcprel/mcprel/store"
)

// MaxCount is the most intents Counts counts in one state: past it the
// count says "at least" (Counts.Capped), so that counting costs a bounded
// read of an index however many intents the outbox holds.
const MaxCount = 10_000

// Counts are how many intents wait to be delivered and how many failed
// (kept for Options.Retention), for an operator's status page.
type Counts struct {
	Pending, Failed             int
	PendingCapped, FailedCapped bool
}

// Counts counts the pending and the failed intents, every tenant's, each
// at most MaxCount. Each count reads one partial index: the due intents'
// and the ended ones'.
func (o *Outbox) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	err := o.db.ReadTx(ctx, func(tx *store.Tx) error {
		// The conditions name the partial indexes' own (state = 1,
		// state > 1), so that both databases read the index.
		var err error
		if c.Pending, c.PendingCapped, err = tx.CountAtMost(ctx, MaxCount, `mcprel_outbox WHERE state = 1`); err != nil {
			return err
		}
		c.Failed, c.FailedCapped, err = tx.CountAtMost(ctx, MaxCount, `mcprel_outbox WHERE state > 1 AND state = 3`)
		return err
	})
	if err != nil {
		return Counts{}, err
	}
	return c, nil
}

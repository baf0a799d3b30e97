package tasks

import (
	"context"
	"time"

	"github.com/mcprel/mcprel/store"
)

// MaxCount is the most tasks Counts counts in one status: past it the
// count says "at least" (Counts.Capped), so that counting costs a bounded
// read of an index however many tasks the store holds.
const MaxCount = 10_000

// Counts are how many stored tasks are in each status, for an operator's
// status page.
type Counts struct {
	// ByStatus counts the tasks of each status, each at most MaxCount.
	ByStatus map[Status]int
	// Capped names the statuses with more than MaxCount tasks.
	Capped map[Status]bool
	// OldestWorking is when the oldest task still working was created;
	// zero when none is working.
	OldestWorking time.Time
}

// Statuses are the statuses of a task, in the order of their life.
var Statuses = []Status{Working, InputRequired, Completed, Failed, Cancelled}

// Counts counts the stored tasks by status, every tenant's, each status
// at most MaxCount, and finds the oldest working one. It reads the index
// of tasks by status only.
func (s *Store) Counts(ctx context.Context) (Counts, error) {
	c := Counts{ByStatus: map[Status]int{}, Capped: map[Status]bool{}}
	err := s.db.ReadTx(ctx, func(tx *store.Tx) error {
		for _, st := range Statuses {
			n, capped, err := tx.CountAtMost(ctx, MaxCount, `mcprel_tasks WHERE status = ?`, int(st))
			if err != nil {
				return err
			}
			if capped {
				c.Capped[st] = true
			}
			c.ByStatus[st] = n
		}
		var oldest *int64
		if err := tx.QueryRow(ctx, `SELECT MIN(created_at) FROM mcprel_tasks WHERE status = ?`, int(Working)).Scan(&oldest); err != nil {
			return err
		}
		if oldest != nil {
			c.OldestWorking = time.UnixMilli(*oldest)
		}
		return nil
	})
	if err != nil {
		return Counts{}, err
	}
	return c, nil
}

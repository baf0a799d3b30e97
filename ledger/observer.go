package ledger

import (
	"context"
	"errors"
	"time"
)

// Observer is told of each ledger operation (Do, Claim, Complete,
// Release, Lookup) and the transaction it runs: traces put a span around
// it, metrics time it. Its methods take plain values, so that an
// implementation need not import this package, and this package links no
// metrics or tracing library.
//
// TxStarted is called as the operation starts, with the caller's context;
// the context it returns is the one the operation runs with (a tracer
// starts a child span there). TxEnded is called once, with that context,
// when the operation returns: result is "ok", "conflict" (the key was
// used for another operation), "in_progress" (another caller holds it),
// "not_found" (Lookup), "cancelled" (the caller's context ended first) or
// "error" (the store failed). Neither may block.
type Observer interface {
	TxStarted(ctx context.Context, op string) context.Context
	TxEnded(ctx context.Context, op, result string, d time.Duration)
}

// observe starts observing op and returns the context it runs with and
// the function that ends it.
func (l *Ledger) observe(ctx context.Context, op string) (context.Context, func(error)) {
	if len(l.observers) == 0 {
		return ctx, ignoreEnd
	}
	start := time.Now()
	for _, o := range l.observers {
		ctx = o.TxStarted(ctx, op)
	}
	return ctx, func(err error) {
		d, result := time.Since(start), resultOf(err)
		if err != nil && ctx.Err() != nil && result != "conflict" {
			// The caller gave up (Do then answers "in progress": retrying
			// the key is safe); not a failure of the store.
			result = "cancelled"
		}
		for _, o := range l.observers {
			o.TxEnded(ctx, op, result, d)
		}
	}
}

func ignoreEnd(error) {}

func resultOf(err error) string {
	var conflict *ConflictError
	var busy *InProgressError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &conflict):
		return "conflict"
	case errors.As(err, &busy):
		return "in_progress"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	}
	return "error"
}

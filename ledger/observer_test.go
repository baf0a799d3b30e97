package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/store"
)

type spanKey struct{}

// recordingObserver keeps what it is told, and marks the context it
// returns so that the test can see the operation ran with it.
type recordingObserver struct {
	mu    sync.Mutex
	ended []string
}

func (o *recordingObserver) TxStarted(ctx context.Context, op string) context.Context {
	return context.WithValue(ctx, spanKey{}, op)
}

func (o *recordingObserver) TxEnded(ctx context.Context, op, result string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ctx.Value(spanKey{}) != op {
		o.ended = append(o.ended, "ended with another context")
	}
	if d <= 0 {
		o.ended = append(o.ended, "no duration")
	}
	o.ended = append(o.ended, op+":"+result)
}

// Every ledger operation is observed once, with its result, and runs with
// the context the observer returned: the effect sees it, so a tracer's
// span for the transaction is the parent of whatever the effect does.
func TestObserverSeesEveryOperation(t *testing.T) {
	obs := &recordingObserver{}
	l := open(t, storetest.SQLite(t), &ledger.Options{Observers: []ledger.Observer{obs}})
	ctx := context.Background()
	var effectSaw any
	effect := func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
		effectSaw = ctx.Value(spanKey{})
		return json.RawMessage(`{"ok":true}`), nil
	}
	if _, err := l.Do(ctx, op("acme", "k1", `{"n":1}`), effect); err != nil {
		t.Fatal(err)
	}
	if effectSaw != "do" {
		t.Errorf("the effect ran with context value %v, want the observer's", effectSaw)
	}
	var conflict *ledger.ConflictError
	if _, err := l.Do(ctx, op("acme", "k1", `{"n":2}`), effect); !errors.As(err, &conflict) {
		t.Fatalf("reuse with other arguments: %v, want a conflict", err)
	}
	claim, _, err := l.Claim(ctx, op("acme", "k2", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Claim(ctx, op("acme", "k2", `{}`)); err == nil {
		t.Fatal("a held key was claimed twice")
	}
	if _, err := claim.Complete(ctx, json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lookup(ctx, "acme", "reserve", "k-none"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("lookup of an unknown key: %v", err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	want := "[do:ok do:conflict claim:ok claim:in_progress complete:ok lookup:not_found]"
	if got := fmt.Sprint(obs.ended); got != want {
		t.Fatalf("observed %s, want %s", got, want)
	}
}

// An operation whose caller gave up is "cancelled", not a store failure.
func TestObserverTellsCancelledFromErrors(t *testing.T) {
	obs := &recordingObserver{}
	l := open(t, storetest.SQLite(t), &ledger.Options{Observers: []ledger.Observer{obs}})
	ctx, cancel := context.WithCancel(context.Background())
	_, err := l.Do(ctx, op("acme", "k1", `{}`), func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
		cancel()
		return nil, context.Cause(ctx)
	})
	if err == nil {
		t.Fatal("the cancelled operation succeeded")
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if fmt.Sprint(obs.ended) != "[do:cancelled]" {
		t.Fatalf("observed %v, want [do:cancelled]", obs.ended)
	}
}

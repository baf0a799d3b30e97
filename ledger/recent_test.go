package ledger_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/store"
)

// While SQLite's writer is held, a duplicate of a key this ledger recorded
// is answered from a read at once. A fresh key, and a duplicate of a key
// recorded through another ledger (another process, as far as this one
// knows), do not pay that read: they queue for the writer, which runs the
// fresh one once and replays the other.
func TestOnlyKnownKeysAreReadFirst(t *testing.T) {
	ctx := context.Background()
	a := open(t, storetest.SQLite(t), nil)
	b, err := ledger.Open(ctx, a.DB(), nil) // the same database and writer
	if err != nil {
		t.Fatal(err)
	}
	known, elsewhere, fresh := op("acme", "known", `{"quantity":1}`), op("acme", "elsewhere", `{"quantity":1}`), op("acme", "fresh", `{"quantity":1}`)
	if _, err := a.Do(ctx, known, reserve(nil, known, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Do(ctx, elsewhere, reserve(nil, elsewhere, 1)); err != nil {
		t.Fatal(err)
	}

	decisions := make(chan bool, 3)
	ledger.OnRoute(a, func(readFirst bool) { decisions <- readFirst })
	held, release, holder := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		holder <- a.DB().WriteTx(ctx, func(*store.Tx) error { close(held); <-release; return nil })
	}()
	<-held

	// Queued behind the held writer, this call would not return.
	res, err := a.Do(ctx, known, reserve(nil, known, 1))
	if err != nil || !res.Replayed {
		t.Fatalf("duplicate of a known key: %+v, %v; want a replay", res, err)
	}
	if !<-decisions {
		t.Fatal("the duplicate of a known key was not read first")
	}

	var executed atomic.Int64
	type answer struct {
		key string
		res ledger.Result
		err error
	}
	answers := make(chan answer, 2)
	for _, o := range []ledger.Op{elsewhere, fresh} {
		go func() {
			res, err := a.Do(ctx, o, reserve(&executed, o, 1))
			answers <- answer{o.Key, res, err}
		}()
	}
	for range 2 {
		if <-decisions {
			t.Fatal("a key this ledger never recorded was read first")
		}
	}
	close(release)
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("%s: %v", a.key, a.err)
		}
		if want := a.key == "elsewhere"; a.res.Replayed != want {
			t.Errorf("%s: replayed %v, want %v", a.key, a.res.Replayed, want)
		}
	}
	if executed.Load() != 1 {
		t.Fatalf("%d executions, want 1 (the fresh key's)", executed.Load())
	}
}

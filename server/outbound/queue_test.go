package outbound

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func drain(t *testing.T, o *Queue) []string {
	t.Helper()
	var out []string
	for {
		f, ok := o.TryNext()
		if !ok {
			return out
		}
		out = append(out, string(f.Data))
	}
}

func mustReserve(t *testing.T, o *Queue) {
	t.Helper()
	if err := o.Reserve(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestQueueCoalescesProgressPerRequest(t *testing.T) {
	o := New(8)
	a, b := new(int), new(int)
	o.PushProgress(a, []byte("a1"))
	o.PushProgress(b, []byte("b1"))
	o.PushProgress(a, []byte("a2")) // replaces a1 in place
	o.PushProgress(a, []byte("a3"))
	if got := fmt.Sprint(drain(t, o)); got != "[a3 b1]" {
		t.Fatalf("queue = %s, want [a3 b1]", got)
	}
	if dropped, coalesced, _ := o.counts(); dropped != 0 || coalesced != 2 {
		t.Fatalf("dropped %d coalesced %d, want 0 and 2", dropped, coalesced)
	}
	// After a frame is written, the next one queues anew.
	o.PushProgress(a, []byte("a4"))
	if got := fmt.Sprint(drain(t, o)); got != "[a4]" {
		t.Fatalf("queue = %s", got)
	}
}

func TestQueueDropsOldestProgressAndKeepsFinals(t *testing.T) {
	o := New(4)
	owners := []*int{new(int), new(int), new(int), new(int), new(int)}
	mustReserve(t, o)
	for i := range 3 {
		o.PushProgress(owners[i], []byte(fmt.Sprintf("p%d", i)))
	}
	// One reservation plus three progress frames fill the queue: the next
	// progress frame evicts the oldest, p0.
	o.PushProgress(owners[3], []byte("p3"))
	if dropped, _, refetch := o.counts(); !refetch || dropped != 1 {
		t.Fatalf("refetch=%v dropped=%d, want a drop flagged", refetch, dropped)
	}
	if err := o.PushReserved(Final, owners[4], []byte("final")); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(drain(t, o)); got != "[p1 p2 p3 final]" {
		t.Fatalf("queue = %s, want the oldest progress gone and the final kept", got)
	}
}

func TestQueueRefusesToDropAFinalForAnother(t *testing.T) {
	o := New(2)
	mustReserve(t, o)
	mustReserve(t, o)
	if err := o.PushReserved(Final, 1, []byte("f1")); err != nil {
		t.Fatal(err)
	}
	if err := o.PushReserved(Final, 2, []byte("f2")); err != nil {
		t.Fatal(err)
	}
	// A third response without a reservation could only be kept by dropping
	// one of the two above: refused, and the two are intact.
	if err := o.PushReserved(Final, 3, []byte("f3")); !errors.Is(err, ErrFinalOverflow) {
		t.Fatalf("push = %v, want ErrFinalOverflow", err)
	}
	// Progress cannot displace them either.
	o.PushProgress(4, []byte("p"))
	if got := fmt.Sprint(drain(t, o)); got != "[f1 f2]" {
		t.Fatalf("queue = %s", got)
	}
	if dropped, _, _ := o.counts(); dropped != 1 {
		t.Fatalf("dropped = %d, want the progress frame counted", dropped)
	}
}

func TestQueueReservationWaitsForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := New(2)
		mustReserve(t, o)
		mustReserve(t, o)
		got := make(chan error, 1)
		go func() { got <- o.Reserve(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("reserve returned %v while the queue was full", err)
		default:
		}
		o.Unreserve()
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	})
}

func TestQueueReservationGivesUpWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := New(2)
		mustReserve(t, o)
		mustReserve(t, o)
		ctx, cancel := context.WithCancelCause(context.Background())
		got := make(chan error, 1)
		go func() { got <- o.Reserve(ctx) }()
		synctest.Wait()
		stop := errors.New("connection gone")
		cancel(stop)
		if err := <-got; !errors.Is(err, stop) {
			t.Fatalf("reserve = %v, want the context's cause", err)
		}
	})
}

func TestQueueDiscardWithdrawsAnOwnersFrames(t *testing.T) {
	o := New(8)
	a, b := new(int), new(int)
	o.PushProgress(a, []byte("a"))
	o.PushDroppable(a, []byte("a-log"))
	o.PushProgress(b, []byte("b"))
	o.Discard(a)
	if got := fmt.Sprint(drain(t, o)); got != "[b]" {
		t.Fatalf("queue = %s, want only b's frame", got)
	}
	if o.Len() != 0 {
		t.Fatalf("Len = %d after draining", o.Len())
	}
}

func TestQueueCloseDrainsThenEOF(t *testing.T) {
	o := New(4)
	mustReserve(t, o)
	o.PushReserved(Final, 1, []byte("f"))
	o.Close()
	if f, err := o.Next(context.Background()); err != nil || string(f.Data) != "f" {
		t.Fatalf("Next = %q, %v", f.Data, err)
	}
	if _, err := o.Next(context.Background()); err != io.EOF {
		t.Fatalf("Next after drain = %v, want io.EOF", err)
	}
	if err := o.Reserve(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("reserve after Close = %v", err)
	}
}

// TestQueueStaysBounded pushes a million progress reports from many
// requests into a small queue that nobody reads: it never holds more than
// its capacity.
func TestQueueStaysBounded(t *testing.T) {
	o := New(16)
	owners := make([]*int, 100)
	for i := range owners {
		owners[i] = new(int)
	}
	for i := range 1_000_000 {
		o.PushProgress(owners[i%len(owners)], []byte("p"))
		if o.Len() > 16 {
			t.Fatalf("queue holds %d frames, capacity 16", o.Len())
		}
	}
	if len(o.queue) > 2*16+1 {
		t.Fatalf("queue slice grew to %d entries", len(o.queue))
	}
}

func TestRefetchFlagGoesOnTheNextResult(t *testing.T) {
	o := New(4)
	mustReserve(t, o)
	mustReserve(t, o)
	o.PushProgress(1, []byte("p"))
	o.PushProgress(2, []byte("q"))
	o.PushProgress(3, []byte("r")) // no room: dropped
	o.PushFinal(1, []byte(`{"jsonrpc":"2.0","id":1,"result":{"_meta":{"x":1},"content":[]}}`), 0)
	o.PushFinal(2, []byte(`{"jsonrpc":"2.0","id":2,"result":{}}`), 0)
	got := drain(t, o)
	if len(got) != 4 {
		t.Fatalf("queue = %v", got)
	}
	if !strings.Contains(got[2], `"_meta":{"dev.mcprel/refetch":true,"x":1}`) {
		t.Fatalf("first result after the drop = %s, want the flag beside the existing _meta", got[2])
	}
	if strings.Contains(got[3], "refetch") {
		t.Fatalf("the flag was repeated on a later result: %s", got[3])
	}
	if dropped, _, refetch := o.counts(); !refetch || dropped != 1 {
		t.Fatalf("refetch %v dropped %d", refetch, dropped)
	}
}

// Discarding an owner's frames sweeps the queue when dead frames pile up;
// the sweep must not make the discard skip any of them.
func TestQueueDiscardAcrossASweep(t *testing.T) {
	o := New(4)
	a, b := new(int), new(int)
	for range 4 {
		o.PushDroppable(b, []byte("b"))
	}
	o.Discard(b) // four dead frames stay queued: no sweep yet
	for range 3 {
		o.PushDroppable(a, []byte("a"))
	}
	o.Discard(a) // the first kill sweeps
	if got := drain(t, o); len(got) != 0 {
		t.Fatalf("queue after discarding everything = %v", got)
	}
}

// The refetch flag waits for a result it can go on: an error response
// cannot carry it, so the next result does.
func TestRefetchFlagSkipsAnErrorResponse(t *testing.T) {
	o := New(2)
	mustReserve(t, o)
	o.PushProgress(1, []byte("p"))
	o.PushProgress(2, []byte("q")) // no room: dropped
	o.PushFinal(1, []byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"x"}}`), -32603)
	mustReserve(t, o)
	o.PushFinal(2, []byte(`{"jsonrpc":"2.0","id":2,"result":{}}`), 0)
	got := drain(t, o)
	last := got[len(got)-1]
	if _, _, refetch := o.counts(); !refetch || strings.Contains(got[len(got)-2], "refetch") || !strings.Contains(last, `"id":2`) || !strings.Contains(last, `"dev.mcprel/refetch":true`) {
		t.Fatalf("frames = %v, want the flag on the result after the error", got)
	}
}

// A zero Queue is usable, as its doc says: room for a response, progress
// kept rather than dropped.
func TestZeroQueue(t *testing.T) {
	var o Queue
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := o.Reserve(ctx); err != nil {
		t.Fatalf("reserve on a zero Queue: %v", err)
	}
	owner := new(int)
	if err := o.PushProgress(owner, []byte(`{"progress":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := o.PushFinal(owner, []byte(`{"result":{}}`), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-o.Ready():
	default:
		t.Fatal("a zero Queue did not signal what it holds")
	}
	var got []string
	for f, ok := o.TryNext(); ok; f, ok = o.TryNext() {
		got = append(got, string(f.Data))
	}
	if len(got) != 2 || got[0] != `{"progress":1}` {
		t.Fatalf("a zero Queue gave %q, want the progress then the response", got)
	}
}

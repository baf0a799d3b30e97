package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
)

// gatedWriter blocks every Write until open is closed, as a server that
// stops reading its stdin does, and keeps what was written.
type gatedWriter struct {
	open chan struct{}
	mcptest.LogBuffer
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	<-g.open
	return g.LogBuffer.Write(p)
}

// A sender that finds the queue full waits for room and gets in once the
// server reads again; a sender that may not wait is refused at once; and
// while nobody waits, frames leaving make no new room channel.
func TestWriterWaitsForRoomOnlyWhenFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gatedWriter{open: make(chan struct{})}
		q := newWriter(g, nil)
		if err := q.post([]byte("first"), false, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the writer took "first" and is stuck in its Write
		for i := range maxQueuedFrames {
			if err := q.post([]byte("queued"), false, nil); err != nil {
				t.Fatalf("frame %d of %d: %v", i+1, maxQueuedFrames, err)
			}
		}
		if err := q.post([]byte("refused"), false, nil); !errors.Is(err, errQueueFull) {
			t.Fatalf("a frame past the bound without waiting: %v, want errQueueFull", err)
		}
		q.mu.Lock()
		wanted := q.roomWanted
		q.mu.Unlock()
		if wanted {
			t.Fatal("a refused frame marked room as wanted; nobody waits for it")
		}

		got := make(chan error, 1)
		go func() {
			_, err := q.enqueueFrame(context.Background(), []byte("late"))
			got <- err
		}()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("a frame past the bound was queued (%v) while the server read nothing", err)
		default:
		}
		q.mu.Lock()
		wanted = q.roomWanted
		q.mu.Unlock()
		if !wanted {
			t.Fatal("a sender waits for room but roomWanted is false: nothing would wake it")
		}

		close(g.open) // the server reads again
		synctest.Wait()
		if err := <-got; err != nil {
			t.Fatalf("the waiting frame: %v", err)
		}
		if !q.close(time.Now().Add(time.Second)) {
			t.Fatal("the queue did not drain")
		}
		lines := strings.Split(strings.TrimSuffix(g.String(), "\n"), "\n")
		if len(lines) != maxQueuedFrames+2 || lines[0] != "first" || lines[len(lines)-1] != "late" {
			t.Fatalf("written %d lines, first %q, last %q; want %d from \"first\" to \"late\"", len(lines), lines[0], lines[len(lines)-1], maxQueuedFrames+2)
		}

		// Nobody waits now: frames leave without a new room channel.
		q2 := newWriter(&gatedWriter{open: g.open}, nil)
		q2.mu.Lock()
		room := q2.room
		q2.mu.Unlock()
		for range 3 {
			if _, err := q2.send(context.Background(), []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		q2.mu.Lock()
		same := q2.room == room
		q2.mu.Unlock()
		if !same {
			t.Fatal("frames left with nobody waiting for room, and the room channel was remade")
		}
		q2.close(time.Now().Add(time.Second))
	})
}

package probe

import (
	"context"
	"fmt"
	"time"

	"github.com/mcprel/mcprel/mcp"
)

// The probe's bounds, for the tests that hold it to them.
const (
	MaxFrames    = maxFrames
	MaxFrameText = maxFrameText
	MaxKept      = maxKept
	MaxKeptBytes = maxKeptBytes
	MaxMessage   = maxMessage
)

// Held is what one connection holds: how much came, and how much of it
// the probe keeps.
type Held struct {
	// Received is how many messages (lines, events) came.
	Received int
	// Kept and KeptBytes are the messages the mailbox holds, and their
	// bytes.
	Kept, KeptBytes int
	// Answered: the response to the request sent is among them.
	Answered bool
	// Frames and FrameBytes are what the recorder holds for the report;
	// LongestFrame the longest frame's text.
	Frames, FrameBytes, LongestFrame int
	// Ended is how the connection's stream ended, if it did.
	Ended error
}

// Flood connects to t in era, sends method (an HTTP POST, whose response
// stream is read), and waits until n messages came or the stream ended —
// or wait passed, an error. It returns what the connection holds then.
func Flood(ctx context.Context, t Target, era mcp.Era, method string, n int, wait time.Duration) (Held, error) {
	rec := newRecorder()
	var box *mailbox
	var id int64
	if len(t.Command) > 0 {
		p, err := startStdio(ctx, &t, era, rec, wait)
		if err != nil {
			return Held{}, err
		}
		defer p.close()
		if id, err = p.request(method, nil, ""); err != nil {
			return Held{}, err
		}
		box = p.box
	} else {
		p, err := newHTTP(ctx, &t, era, rec, wait)
		if err != nil {
			return Held{}, err
		}
		defer p.close(ctx)
		var s *stream
		if id, s, err = p.request(ctx, method, nil, "", nil); err != nil {
			return Held{}, err
		}
		defer s.close()
		box = s.box
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		box.mu.Lock()
		ch, ended := box.changed, box.ended
		box.mu.Unlock()
		if ended != nil || box.count() >= n {
			break
		}
		select {
		case <-ch:
		case <-timer.C:
			return Held{}, fmt.Errorf("after %v, %d messages of %d came, and the stream did not end", wait, box.count(), n)
		}
	}
	h := Held{Received: box.count()}
	box.mu.Lock()
	h.Kept, h.Ended = len(box.msgs), box.ended
	for _, m := range box.msgs {
		h.KeptBytes += len(m.raw)
		h.Answered = h.Answered || m.isResponseTo(id)
	}
	box.mu.Unlock()
	fs := rec.frames()
	h.Frames = len(fs)
	for _, f := range fs {
		h.FrameBytes += len(f.Text)
		h.LongestFrame = max(h.LongestFrame, len(f.Text))
	}
	return h, nil
}

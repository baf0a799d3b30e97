package streamhttp

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/outbound"
)

// TestEventLogBoundsHold drives the log with a long random mix (6000 steps) of what
// streams do — open, progress, log lines, requests to the client,
// responses of every size (some past the per-stream bound), delivery,
// cancellation, sessions ending — over six sessions of three tenants, and
// after every step recounts what the log holds from its entries and checks
// it against each bound and against the log's own accounting. It also
// checks that a response, once appended, stays in the log (itself or the
// error that replaced it) until its stream is done, and otherwise that its
// loss was counted.
func TestEventLogBoundsHold(t *testing.T) {
	opts := ResumeOptions{
		MaxEventsPerStream: 6, MaxBytesPerStream: 4000, MaxStreamsPerSession: 5,
		MaxBytesPerSession: 9000, MaxBytesPerTenant: 14000, MaxBytes: 20000, TTL: time.Hour,
	}
	if err := opts.normalize(); err != nil {
		t.Fatal(err)
	}
	l := newEventLog(opts, opts.MaxBytesPerTenant, slog.New(slog.DiscardHandler))
	rng := rand.New(rand.NewPCG(12, 34))

	type tracked struct {
		s     *stream
		final []byte // the response appended, if any
		lost  bool   // its response could not be kept at all
		cut   bool   // dropped with its session
	}
	var sessions []*sessionLog
	newSession := func(i int) *sessionLog {
		return l.session(fmt.Sprint("s", i), fmt.Sprint("tenant", i%3), nil)
	}
	for i := range 6 {
		sessions = append(sessions, newSession(i))
	}
	var all []*tracked
	var open []*tracked
	payload := func(n int) []byte { return bytes.Repeat([]byte{'x'}, n) }
	lostSeen := int64(0)

	for step := range 6000 {
		switch op := rng.IntN(100); {
		case op < 15: // a new stream
			sl := sessions[rng.IntN(len(sessions))]
			s, _ := l.open(sl, outbound.New(2), jsonrpc.IntID(int64(step)), "tools/call")
			if s != nil {
				tr := &tracked{s: s}
				all = append(all, tr)
				open = append(open, tr)
			}
		case op < 75 && len(open) > 0: // a message on an open stream
			i := rng.IntN(len(open))
			tr := open[i]
			switch k := rng.IntN(10); {
			case k < 5:
				l.append(tr.s, outbound.Frame{Kind: outbound.Progress, Data: payload(50 + rng.IntN(1500))})
			case k < 8:
				l.append(tr.s, outbound.Frame{Kind: outbound.Droppable, Data: payload(50 + rng.IntN(1500))})
			default:
				l.append(tr.s, outbound.Frame{Kind: outbound.Essential, Data: payload(50 + rng.IntN(600))})
			}
		case op < 90 && len(open) > 0: // a response, then maybe its delivery
			i := rng.IntN(len(open))
			tr := open[i]
			open = append(open[:i], open[i+1:]...)
			tr.final = payload(100 + rng.IntN(5000))
			l.append(tr.s, outbound.Frame{Kind: outbound.Final, Data: tr.final})
			if tr.s.gone {
				tr.lost = true
				lostSeen++
			} else if rng.IntN(2) == 0 {
				l.delivered(tr.s)
			}
		case op < 97 && len(open) > 0: // a cancellation
			i := rng.IntN(len(open))
			l.endNoFinal(open[i].s)
			open = append(open[:i], open[i+1:]...)
		case op < 98: // a session ends, and a new one takes its place
			i := rng.IntN(len(sessions))
			l.dropSession(sessions[i])
			for _, tr := range all {
				if tr.s.sess == sessions[i] {
					tr.cut = true
				}
			}
			kept := open[:0]
			for _, tr := range open {
				if !tr.cut {
					kept = append(kept, tr)
				}
			}
			open = kept
			sessions[i] = newSession(i)
		}
		if err := checkEventLog(l, sessions); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		for _, tr := range all {
			s := tr.s
			switch {
			case tr.final == nil || tr.cut || tr.lost:
			case !s.gone:
				last := s.entries[len(s.entries)-1]
				if last.kind != outbound.Final || (!bytes.Equal(last.data, tr.final) && !bytes.Contains(last.data, []byte("too large for the resumption log"))) {
					t.Fatalf("step %d: stream %s lost its response", step, s.key)
				}
			case !s.done:
				t.Fatalf("step %d: stream %s was dropped before its response was delivered", step, s.key)
			}
		}
		if l.stats.Lost != lostSeen {
			t.Fatalf("step %d: %d responses lost, %d counted", step, lostSeen, l.stats.Lost)
		}
	}
	st := l.snapshot()
	t.Logf("after 6000 steps: %+v", st)
	if st.Replaced == 0 || st.Shed == 0 || st.Coalesced == 0 {
		t.Fatalf("the run never pressed the bounds: %+v", st)
	}
	for _, sl := range sessions {
		l.dropSession(sl)
	}
	if st := l.snapshot(); st.Streams != 0 || st.Bytes != 0 || st.Events != 0 || len(l.tenants) != 0 {
		t.Fatalf("after every session ended: %+v, %d tenants", st, len(l.tenants))
	}
}

// checkEventLog recounts the log from its entries.
func checkEventLog(l *eventLog, sessions []*sessionLog) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.opts
	var all usage
	tenants := map[string]*usage{}
	for _, sl := range sessions {
		var sess usage
		for _, s := range sl.streams {
			var bytes, repl int64
			progress, others, finals := 0, 0, 0
			for i, e := range s.entries {
				n := int64(len(e.data))
				bytes += n
				switch e.kind {
				case outbound.Progress:
					progress++
				case outbound.Final:
					finals++
					if i != len(s.entries)-1 {
						return fmt.Errorf("stream %s: a response is not its last event", s.key)
					}
				}
				if e.kind != outbound.Final {
					others++
				}
				if e.replaceable() {
					repl += n
				}
				if i > 0 && e.seq <= s.entries[i-1].seq {
					return fmt.Errorf("stream %s: events out of order", s.key)
				}
			}
			switch {
			case bytes != s.bytes || repl != s.repl:
				return fmt.Errorf("stream %s: holds %d/%d bytes, accounts %d/%d", s.key, bytes, repl, s.bytes, s.repl)
			case bytes > o.MaxBytesPerStream || repl > o.MaxBytesPerStream/2:
				return fmt.Errorf("stream %s: %d bytes (%d replaceable), past %d", s.key, bytes, repl, o.MaxBytesPerStream)
			case len(s.entries) > o.MaxEventsPerStream || others > o.MaxEventsPerStream-1:
				return fmt.Errorf("stream %s: %d events, past %d", s.key, len(s.entries), o.MaxEventsPerStream)
			case progress > 1 || finals > 1:
				return fmt.Errorf("stream %s: %d progress and %d responses", s.key, progress, finals)
			case s.done && others > 0:
				return fmt.Errorf("stream %s: done, yet holds more than its response", s.key)
			}
			ten := tenants[sl.tenant]
			if ten == nil {
				ten = new(usage)
				tenants[sl.tenant] = ten
			}
			for _, u := range []*usage{&sess, ten, &all} {
				u.bytes += bytes
				u.repl += repl
				u.events += len(s.entries)
				u.streams++
				if s.done {
					u.doneBytes += bytes
				}
			}
		}
		if posts := len(sl.streams); posts > o.MaxStreamsPerSession {
			return fmt.Errorf("session %s: %d streams", sl.name, posts)
		}
		if err := sameUsage("session "+sl.name, &sess, &sl.use, o.MaxBytesPerSession); err != nil {
			return err
		}
	}
	for name, u := range tenants {
		if err := sameUsage(name, u, l.tenants[name], l.perTenant); err != nil {
			return err
		}
	}
	return sameUsage("server", &all, &l.all, o.MaxBytes)
}

func sameUsage(scope string, got, kept *usage, bound int64) error {
	if kept == nil {
		return fmt.Errorf("%s: not accounted", scope)
	}
	if got.bytes != kept.bytes || got.repl != kept.repl || got.events != kept.events || got.streams != kept.streams || got.doneBytes != kept.doneBytes {
		return fmt.Errorf("%s: holds %+v, accounts %+v", scope, *got, *kept)
	}
	if got.bytes > bound || got.repl > bound/2 {
		return fmt.Errorf("%s: %d bytes (%d replaceable), past %d", scope, got.bytes, got.repl, bound)
	}
	return nil
}

// The refetch flag goes into a result's _meta, whatever _meta held;
// an error response is left alone.
func TestWithRefetchFlag(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`, `"_meta":{"dev.mcprel/refetch":true}`},
		{`{"jsonrpc":"2.0","id":1,"result":{"_meta":null}}`, `"_meta":{"dev.mcprel/refetch":true}`},
		{`{"jsonrpc":"2.0","id":1,"result":{"_meta":{"k":1}}}`, `"_meta":{"dev.mcprel/refetch":true,"k":1}`},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"m"}}`, `"error":{"code":-32603,"message":"m"}`},
	} {
		if got, _ := refetchFlagged([]byte(tc.in)); !strings.Contains(string(got), tc.want) {
			t.Errorf("%s: got %s, want it to contain %s", tc.in, got, tc.want)
		}
	}
	if mcp.MetaRefetch != "dev.mcprel/refetch" {
		t.Fatalf("mcp.MetaRefetch is %q; update this test", mcp.MetaRefetch)
	}
}

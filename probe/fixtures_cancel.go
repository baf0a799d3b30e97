package probe

import (
	"bytes"
	"context"
	"strings"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// heartbeat is the request the probe sends to see that the server still
// serves: ping in the 2025 era, server/discover in the 2026-07-28 era
// (which has no ping).
func (r *run) heartbeat() string {
	if r.era == mcp.Modern {
		return mcp.MethodDiscover
	}
	return mcp.MethodPing
}

// answersNotification reports whether m is a response no request asked
// for: one without a usable id, as an answer to a notification would be.
func answersNotification(m inbound) bool {
	if m.msg.Kind == jsonrpc.KindResponse && !m.msg.ID.IsValid() {
		return true
	}
	return m.msg.Kind == 0 && bytes.Contains(m.raw, []byte(`"id":null`))
}

// Fixture 1. A call cancelled with notifications/cancelled before it
// completes gets no response afterwards, the notification gets no answer,
// and the connection keeps serving.
func fixtureCancelBeforeCompletion(ctx context.Context, r *run) outcome {
	if r.t.Transport() != "stdio" {
		return notApplicable("a stdio fixture: over Streamable HTTP a request is cancelled by its stream (fixture 4)")
	}
	slow := r.roles.slow
	if o, ok := r.listed(slow, "read that emits progress"); !ok {
		return o
	}
	p, err := startStdio(ctx, r.t, r.era, r.rec, r.timing.Answer)
	if err != nil {
		return fail("%v", err)
	}
	defer p.close()
	c, err := stdioLink{p}.start(ctx, mcp.MethodToolsCall, toolCall(slow, slow.Probe.Arguments), newToken(1), nil)
	if err != nil {
		return fail("sending the call: %v", err)
	}
	if o, ok := r.inFlight(ctx, c, slow); !ok {
		return o
	}
	cancelAt := p.box.count()
	if err := p.notify(mcp.NotificationCancelled, map[string]any{"requestId": c.id, "reason": "mcprel probe: cancelled before completion"}); err != nil {
		return fail("sending the cancellation: %v", err)
	}
	began := time.Now()
	hb, err := p.call(ctx, r.heartbeat(), nil, r.timing.Answer)
	if err != nil {
		return fail("after the cancellation: %v", err)
	}
	answered := time.Since(began)
	_ = hb
	// Reports already on their way may still come; after that a stopped
	// call sends nothing more, and one that runs on is seen running.
	time.Sleep(r.timing.Quiet)
	settled := p.box.count()
	time.Sleep(2 * r.timing.Quiet) // watching for what must not come
	progressAfter, ranOn := 0, 0
	for _, m := range p.box.since(cancelAt) {
		switch {
		case m.isResponseTo(c.id):
			return fail("the server answered the cancelled request (id %d) after the cancellation: %s", c.id, describe(m))
		case answersNotification(m):
			return fail("the server answered the cancellation notification: %s", clip(string(m.raw), 200))
		}
		if tok, _, ok := m.progressOf(); ok && tok == c.token {
			progressAfter++
			if m.seq >= settled {
				ranOn++
			}
		}
	}
	if ranOn > 0 {
		return fail("the call went on after the cancellation: %d of its progress reports came later than %v after the cancellation (in the %v the probe watched then), %d in all after it",
			ranOn, r.timing.Quiet, 2*r.timing.Quiet, progressAfter).
			with("progress_after_cancel", progressAfter).with("progress_after_quiet", ranOn)
	}
	return pass("the cancelled call stopped: no response, no progress after %v, and the notification got no answer; the server answered %s %v after it",
		r.timing.Quiet, r.heartbeat(), answered.Round(time.Millisecond)).with("progress_after_cancel", progressAfter)
}

// Fixture 2. A cancellation that arrives after the response changes
// nothing: the result stands, nothing more is sent, no error.
func fixtureLateCancel(ctx context.Context, r *run) outcome {
	if r.t.Transport() != "stdio" && r.era == mcp.Modern {
		return notApplicable("in the 2026-07-28 era a request over Streamable HTTP is cancelled by closing its stream: there is no late notification to send")
	}
	l, err := open(ctx, r.t, r.era, r.rec, r.timing)
	if err != nil {
		return fail("%v", err)
	}
	defer l.close()
	c, err := l.start(ctx, r.heartbeat(), nil, "", nil)
	if err != nil {
		return fail("%v", err)
	}
	if _, ok := c.response(ctx, r.timing.Answer); !ok {
		return fail("the server did not answer %s within %v", r.heartbeat(), r.timing.Answer)
	}
	if c.s != nil {
		c.s.close()
	}
	late := map[string]any{"requestId": c.id, "reason": "mcprel probe: cancelled after its response"}
	switch l := l.(type) {
	case stdioLink:
		from := l.p.box.count()
		if err := l.p.notify(mcp.NotificationCancelled, late); err != nil {
			return fail("sending the late cancellation: %v", err)
		}
		if _, err := l.p.call(ctx, r.heartbeat(), nil, r.timing.Answer); err != nil {
			return fail("after the late cancellation: %v", err)
		}
		time.Sleep(r.timing.Quiet)
		for _, m := range l.p.box.since(from) {
			if m.msg.Kind == jsonrpc.KindResponse && !m.isResponseTo(l.p.next) || answersNotification(m) {
				return fail("after the late cancellation the server sent %s", clip(string(m.raw), 200))
			}
		}
	case httpLink:
		status, body, err := l.p.notify(ctx, mcp.NotificationCancelled, late)
		if err != nil {
			return fail("posting the late cancellation: %v", err)
		}
		if status >= 300 || len(bytes.TrimSpace(body)) > 0 {
			return fail("the server answered the late cancellation's POST with HTTP %d%s", status, bodyNote(body))
		}
		if _, err := l.p.call(ctx, r.heartbeat(), nil, r.timing.Answer); err != nil {
			return fail("after the late cancellation: %v", err)
		}
	}
	return pass("the result stood; the late cancellation got no answer and the server went on serving")
}

// Fixture 3. Malformed, unknown-id and duplicate cancellations are
// ignored: no answer, and the server keeps serving.
func fixtureBadCancellations(ctx context.Context, r *run) outcome {
	if r.t.Transport() != "stdio" && r.era == mcp.Modern {
		return notApplicable("the 2026-07-28 era defines no notification from client to server over Streamable HTTP")
	}
	bad := []string{
		`{"jsonrpc":"2.0","method":"notifications/cancelled"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":"not an object"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":{"not":"an id"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":987654321,"reason":"never sent"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":987654321,"reason":"never sent, again"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"probe-unknown"}}`,
	}
	l, err := open(ctx, r.t, r.era, r.rec, r.timing)
	if err != nil {
		return fail("%v", err)
	}
	defer l.close()
	switch l := l.(type) {
	case stdioLink:
		from := l.p.box.count()
		for _, b := range bad {
			if err := l.p.write([]byte(b)); err != nil {
				return fail("sending %s: %v", b, err)
			}
		}
		if _, err := l.p.call(ctx, r.heartbeat(), nil, r.timing.Answer); err != nil {
			return fail("after %d malformed and unknown cancellations: %v", len(bad), err)
		}
		time.Sleep(r.timing.Quiet)
		for _, m := range l.p.box.since(from) {
			if answersNotification(m) || m.msg.Kind == jsonrpc.KindResponse && !m.isResponseTo(l.p.next) {
				return fail("the server answered a cancellation notification: %s", clip(string(m.raw), 200))
			}
		}
	case httpLink:
		for _, b := range bad {
			s, err := l.p.post(ctx, []byte(b), mcp.NotificationCancelled, "", nil)
			if err != nil {
				return fail("posting %s: %v", b, err)
			}
			if !s.ended(r.timing.Answer) {
				return fail("%v", s.endless("the notification "+b, r.timing.Answer))
			}
			// Streamable HTTP: 202 for a notification taken, or a 4xx —
			// with at most an error that has no id — for one that is not.
			for _, m := range s.box.since(0) {
				if m.msg.ID.IsValid() {
					return fail("the server answered the notification %s as a request: %s (HTTP %d)", b, clip(string(m.raw), 200), s.status)
				}
			}
			if s.status >= 500 || s.status < 400 && s.status != 202 && s.status != 200 {
				return fail("the server answered the notification %s with HTTP %d", b, s.status)
			}
		}
		if _, err := l.p.call(ctx, r.heartbeat(), nil, r.timing.Answer); err != nil {
			return fail("after %d malformed and unknown cancellations: %v", len(bad), err)
		}
	}
	return pass("%d malformed, unknown and repeated cancellations were ignored, and the server went on serving", len(bad))
}

// Fixture 4. Over Streamable HTTP: in the 2026-07-28 era closing a
// request's stream cancels it; in the 2025 era a POSTed cancellation is
// honoured, and a dropped stream is not a cancellation.
func fixtureStreamCancel(ctx context.Context, r *run) outcome {
	if r.t.Transport() == "stdio" {
		return notApplicable("a Streamable HTTP fixture")
	}
	slow := r.roles.slow
	if o, ok := r.listed(slow, "read that emits progress"); !ok {
		return o
	}
	p, err := newHTTP(ctx, r.t, r.era, r.rec, r.timing.Answer)
	if err != nil {
		return fail("%v", err)
	}
	defer p.close(ctx)
	if r.era == mcp.Modern {
		return streamCloseCancels(ctx, r, p)
	}
	return postedCancel(ctx, r, p)
}

// closedStreams is how many slow calls the 2026-07-28 check opens and
// closes: a server that ran them on, bounded in concurrency, would be slow
// to start the next.
const closedStreams = 8

func streamCloseCancels(ctx context.Context, r *run, p *httpPeer) outcome {
	slow := r.roles.slow
	for i := range closedStreams {
		c, err := p.callTool(ctx, slow, slow.Probe.Arguments, newToken(i))
		if err != nil {
			return fail("%v", err)
		}
		if o, ok := r.inFlight(ctx, c, slow); !ok {
			return o
		}
		r.rec.note("the probe closes the stream of request %d", c.id)
		c.s.close()
	}
	// The next call starts at once if the closed ones ended.
	began := time.Now()
	c, err := p.callTool(ctx, slow, slow.Probe.Arguments, newToken(99))
	if err != nil {
		return fail("%v", err)
	}
	defer c.s.close()
	if _, _, ok := c.progress(ctx, 0, r.timing.Answer); !ok {
		return fail("after %d streams closed mid-call, a new call of %q reported no progress within %v: the closed calls may still be running", closedStreams, slow.Name, r.timing.Answer)
	}
	return pass("%d calls whose streams were closed mid-progress left the server free: a new one reported progress %v after it was sent (whether each handler stopped is not visible from outside)",
		closedStreams, time.Since(began).Round(time.Millisecond)).with("next_progress_ms", ms(time.Since(began)))
}

func postedCancel(ctx context.Context, r *run, p *httpPeer) outcome {
	slow := r.roles.slow
	c, err := p.callTool(ctx, slow, slow.Probe.Arguments, newToken(1))
	if err != nil {
		return fail("%v", err)
	}
	if o, ok := r.inFlight(ctx, c, slow); !ok {
		return o
	}
	id, s := c.id, c.s
	status, body, err := p.notify(ctx, mcp.NotificationCancelled, map[string]any{"requestId": id, "reason": "mcprel probe: cancelled by POST"})
	if err != nil {
		s.close()
		return fail("posting the cancellation: %v", err)
	}
	if status >= 300 {
		s.close()
		return fail("the server refused the POSTed cancellation: HTTP %d%s", status, bodyNote(body))
	}
	cancelAt := s.box.count()
	// Progress may be in flight; once the server acted it stops, and no
	// response comes.
	time.Sleep(r.timing.Quiet)
	settled := s.box.count()
	time.Sleep(2 * r.timing.Quiet)
	for _, m := range s.box.since(cancelAt) {
		if m.isResponseTo(id) {
			s.close()
			return fail("the server answered the request cancelled by POST: %s", describe(m))
		}
	}
	ranOn := 0
	for _, m := range s.box.since(settled) {
		if tok, _, ok := m.progressOf(); ok && tok == c.token {
			ranOn++
		}
	}
	if ranOn > 0 {
		s.close()
		return fail("progress went on after the POSTed cancellation: %d of its progress reports came later than %v after the cancellation (in the %v the probe watched then)",
			ranOn, r.timing.Quiet, 2*r.timing.Quiet).with("progress_after_quiet", ranOn)
	}
	s.close()
	detail := "a POSTed cancellation stopped the call: no response, no more progress"
	return droppedStream(ctx, r, p, detail)
}

// droppedStream checks the 2025 era's other half: a stream the client
// drops is no cancellation, which a resumed stream (Last-Event-ID) shows.
func droppedStream(ctx context.Context, r *run, p *httpPeer, detail string) outcome {
	slow := r.roles.slow
	c, err := p.callTool(ctx, slow, slow.Probe.Arguments, newToken(2))
	if err != nil {
		return fail("%v", err)
	}
	if o, ok := r.inFlight(ctx, c, slow); !ok {
		return o
	}
	id, s := c.id, c.s
	last := s.lastEventID()
	r.rec.note("the probe drops the stream of request %d", id)
	s.close()
	if last == "" {
		return pass("%s; the server's events carry no id, so whether a dropped stream cancels the call is not visible from outside", detail)
	}
	g, err := p.get(ctx, map[string]string{mcp.HeaderLastEventID: last})
	if err != nil {
		return fail("resuming the dropped stream: %v", err)
	}
	defer g.close()
	if g.status >= 300 {
		return pass("%s; resuming the dropped stream was refused (HTTP %d), so whether the call went on is not visible", detail, g.status)
	}
	resumed := &call{id: id, token: newToken(2), box: g.box}
	if _, _, ok := resumed.progress(ctx, 0, r.timing.Answer); ok {
		return pass("%s; the dropped stream's call went on: its resumed stream carried more progress", detail)
	}
	if _, ok := resumed.response(ctx, 0); ok {
		return pass("%s; the dropped stream's call went on: its resumed stream carried its response", detail)
	}
	return fail("the call whose stream was dropped sent nothing more on its resumed stream (Last-Event-ID %s): the drop cancelled it", last)
}

// Fixture 5. Progress strictly increases and never follows the final
// response; its rate is measured.
func fixtureProgress(ctx context.Context, r *run) outcome {
	slow := r.roles.slow
	if o, ok := r.listed(slow, "read that emits progress"); !ok {
		return o
	}
	l, err := open(ctx, r.t, r.era, r.rec, r.timing)
	if err != nil {
		return fail("%v", err)
	}
	defer l.close()
	c, err := l.start(ctx, mcp.MethodToolsCall, toolCall(slow, slow.Probe.Arguments), newToken(1), nil)
	if err != nil {
		return fail("%v", err)
	}
	resp, ok := c.response(ctx, r.timing.Deadline)
	if !ok {
		if c.s != nil {
			c.s.close()
		}
		return fail("%q did not answer within %v: give it probe arguments that end sooner", slow.Name, r.timing.Deadline)
	}
	time.Sleep(r.timing.Quiet) // watching for progress after the response
	var values []float64
	var times []time.Time
	after := 0
	for _, m := range c.box.since(c.from) {
		tok, v, ok := m.progressOf()
		if !ok || tok != c.token {
			continue
		}
		if m.at.After(resp.at) {
			after++
			continue
		}
		values = append(values, v)
		times = append(times, m.at)
	}
	if c.s != nil {
		c.s.close()
	}
	if after > 0 {
		return fail("%d progress reports came after the final response", after)
	}
	if len(values) == 0 {
		return fail("%q reported no progress, though the policy says it emits it", slow.Name)
	}
	for i := 1; i < len(values); i++ {
		if values[i] <= values[i-1] {
			return fail("progress went from %v to %v: not strictly increasing", values[i-1], values[i])
		}
	}
	out := pass("%d reports, strictly increasing, none after the final response", len(values)).with("reports", len(values))
	if len(times) > 1 {
		span := times[len(times)-1].Sub(times[0])
		minGap := span
		for i := 1; i < len(times); i++ {
			minGap = min(minGap, times[i].Sub(times[i-1]))
		}
		out = out.with("reports_per_second", float64(len(times)-1)/span.Seconds()).with("min_gap_ms", ms(minGap))
	}
	return out
}

// Fixture 6. A call that makes no progress: whether the server ends it
// on its own — by a deadline of its own — how, and after how long. No
// spec requires a server to have one (without one, the client's deadline
// must end such a call), so a server without one does not fail; one that
// drops the call without an answer does.
func fixtureDeadline(ctx context.Context, r *run) outcome {
	op := r.roles.stall
	if o, ok := r.listed(op, "tool with stall_arguments"); !ok {
		return o
	}
	wait := r.timing.Deadline
	l, err := open(ctx, r.t, r.era, r.rec, r.timing)
	if err != nil {
		return fail("%v", err)
	}
	defer l.close()
	began := time.Now()
	c, err := l.start(ctx, mcp.MethodToolsCall, toolCall(op, op.Probe.Stall), newToken(1), nil)
	if err != nil {
		return fail("%v", err)
	}
	m, ok := c.response(ctx, wait)
	took := time.Since(began)
	if c.s != nil {
		defer c.s.close()
	}
	if !ok {
		if err := c.box.endedWith(); err != nil {
			return fail("the server's %s ended %v after the call was sent, without an answer (%v)", map[bool]string{true: "response stream", false: "output"}[c.s != nil], took.Round(time.Millisecond), err)
		}
		if ctx.Err() != nil {
			return fail("the run was stopped %v after the call was sent, before it ended", took.Round(time.Millisecond))
		}
		return pass("the server has no deadline of its own for a call without progress: the call was still running after %v (no spec requires one; the client's deadline must end such a call)", wait).
			with("server_deadline", false).with("watched_ms", ms(wait))
	}
	how := describe(m)
	if failed, text := toolFailed(m); failed && strings.Contains(text, "timeout") {
		how = "a timeout result"
	}
	return pass("the server has a deadline of its own: it ended the call after %v with %s", took.Round(time.Millisecond), how).
		with("server_deadline", true).with("ended_after_ms", ms(took))
}

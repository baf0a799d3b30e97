package probe

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/review"
)

// keyArgument is where the mutation's idempotency key goes.
func keyArgument(op *review.Operation) string {
	if op.Idempotency.KeyArgument != "" {
		return op.Idempotency.KeyArgument
	}
	return mcp.ArgIdempotencyKey
}

// withKey is args with the key added (none for "").
func withKey(op *review.Operation, args map[string]any, key string) map[string]any {
	out := make(map[string]any, len(args)+1)
	for k, v := range args {
		out[k] = v
	}
	if key != "" {
		out[keyArgument(op)] = key
	}
	return out
}

// changed is args with one operation-defining argument changed (a number
// plus one, or a string with a suffix), and its name; "" when none can be.
func changed(op *review.Operation, args map[string]any) (map[string]any, string) {
	names := make([]string, 0, len(args))
	for k := range args {
		if k != keyArgument(op) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	out := make(map[string]any, len(args))
	for k, v := range args {
		out[k] = v
	}
	for _, k := range names {
		switch v := args[k].(type) {
		case int:
			out[k] = v + 1
		case float64:
			out[k] = v + 1
		case string:
			out[k] = v + "-probe"
		default:
			continue
		}
		return out, k
	}
	return nil, ""
}

func probeKey() string { return "probe-" + rand.Text() }

// counter reads the number a mutation moves.
type counter struct {
	l     link
	r     *run
	count *review.ProbeCount
}

func (c counter) read(ctx context.Context) (float64, error) {
	m, err := c.l.call(ctx, mcp.MethodToolsCall, map[string]any{"name": c.count.Tool, "arguments": c.count.Arguments}, c.r.timing.Answer)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", c.count.Tool, err)
	}
	if m.msg.Error != nil {
		return 0, fmt.Errorf("reading %s: %s", c.count.Tool, errorText(m.msg.Error))
	}
	var res struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Content           []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(m.msg.Result, &res); err != nil {
		return 0, fmt.Errorf("reading %s: %w", c.count.Tool, err)
	}
	if res.IsError {
		return 0, fmt.Errorf("reading %s: it failed: %s", c.count.Tool, describe(m))
	}
	doc := res.StructuredContent
	if len(doc) == 0 && len(res.Content) > 0 {
		doc = json.RawMessage(res.Content[0].Text)
	}
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return 0, fmt.Errorf("reading %s: its result is no JSON object", c.count.Tool)
	}
	for _, part := range strings.Split(c.count.Field, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("reading %s: no field %q in %s", c.count.Tool, c.count.Field, clip(string(doc), 200))
		}
		v = obj[part]
	}
	n, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("reading %s: field %q is %v, no number", c.count.Tool, c.count.Field, v)
	}
	return n, nil
}

// executions is how many executions moved the number from before to
// after.
func (c counter) executions(before, after float64) int {
	step := c.count.Step
	if step == 0 {
		step = 1
	}
	return int((after-before)/step + 0.5)
}

// refused reports whether a tools/call was refused: a JSON-RPC error or
// a failed result.
func refused(m inbound) bool {
	failed, _ := toolFailed(m)
	return m.msg.Error != nil || failed
}

// Fixture 7. A mutation sent twice without a key executes twice (the
// tool is UNSAFE); with a key, once; the same key with other arguments
// is refused.
func fixtureDuplicateMutation(ctx context.Context, r *run) outcome {
	op := r.roles.mutation
	if o, ok := r.listed(op, "mutation with a count read"); !ok {
		return o
	}
	l, err := open(ctx, r.t, r.era, r.rec, r.timing)
	if err != nil {
		return fail("%v", err)
	}
	defer l.close()
	cnt := counter{l: l, r: r, count: op.Probe.Count}
	mode := deref(op.Idempotency.Key)
	send := func(args map[string]any) (inbound, error) {
		return l.call(ctx, mcp.MethodToolsCall, toolCall(op, args), r.timing.Answer)
	}
	before, err := cnt.read(ctx)
	if err != nil {
		return fail("%v%s", err, setupNote(r))
	}
	var unkeyed []inbound
	for range 2 {
		m, err := send(op.Probe.Arguments)
		if err != nil {
			return fail("an unkeyed call: %v", err)
		}
		unkeyed = append(unkeyed, m)
	}
	mid, err := cnt.read(ctx)
	if err != nil {
		return fail("%v", err)
	}
	plain := cnt.executions(before, mid)
	class := "UNSAFE"
	var notes []string
	switch {
	case plain >= 2:
		notes = append(notes, fmt.Sprintf("sent twice without a key, it executed %d times: UNSAFE to retry without a key", plain))
		if mode == "required" {
			return fail("the policy says the key is required, and the tool executed %d times without one", plain).with("class", class)
		}
	case plain == 1:
		notes = append(notes, "sent twice without a key, it executed once")
	case refused(unkeyed[0]) && refused(unkeyed[1]):
		notes = append(notes, "without a key it was refused: "+describe(unkeyed[0]))
	default:
		notes = append(notes, "sent twice without a key, nothing executed")
	}
	if mode == "none" || mode == "" || mode == "version" {
		return pass("%s; the policy gives it no idempotency key to check", strings.Join(notes, "; ")).with("class", class).with("executions_unkeyed", plain)
	}
	key := probeKey()
	keyed := withKey(op, op.Probe.Arguments, key)
	first, err := send(keyed)
	if err != nil {
		return fail("the first keyed call: %v", err)
	}
	if refused(first) {
		return fail("the first call with a fresh key was refused: %s", describe(first))
	}
	again, err := send(keyed)
	if err != nil {
		return fail("the keyed retry: %v", err)
	}
	after, err := cnt.read(ctx)
	if err != nil {
		return fail("%v", err)
	}
	if n := cnt.executions(mid, after); n != 1 {
		return fail("sent twice with one key and the same arguments, it executed %d times", n).with("class", class)
	}
	class = "CONDITIONAL"
	notes = append(notes, "with one key, twice: executed once (the retry got "+describe(again)+")")
	other, name := changed(op, op.Probe.Arguments)
	if other == nil {
		return pass("%s; no argument to change for the reuse check", strings.Join(notes, "; ")).with("class", class)
	}
	reuse, err := send(withKey(op, other, key))
	if err != nil {
		return fail("the key reused with other arguments: %v", err)
	}
	last, err := cnt.read(ctx)
	if err != nil {
		return fail("%v", err)
	}
	if n := cnt.executions(after, last); n != 0 || !refused(reuse) {
		return fail("the key reused with %s changed was not refused: %s, %d executions", name, describe(reuse), n).with("class", class)
	}
	notes = append(notes, "the key reused with "+name+" changed was refused: "+describe(reuse))
	return pass("%s", strings.Join(notes, "; ")).with("class", class).with("executions_unkeyed", plain)
}

func setupNote(r *run) string {
	if r.roles.setupNote != "" {
		return " (" + r.roles.setupNote + ")"
	}
	return ""
}

// Fixture 8. Two connections racing one key at once: one execution.
func fixtureRaceOneKey(ctx context.Context, r *run) outcome {
	op := r.roles.mutation
	if o, ok := r.listed(op, "mutation with a count read"); !ok {
		return o
	}
	if mode := deref(op.Idempotency.Key); mode != "required" && mode != "optional" {
		return notApplicable("the policy gives %q no idempotency key", op.Name)
	}
	a, err := open(ctx, r.t, r.era, r.rec, r.timing)
	if err != nil {
		return fail("%v", err)
	}
	defer a.close()
	b := a
	how := "two requests at once on one connection (stdio has one per process)"
	if r.t.Transport() != "stdio" {
		if b, err = open(ctx, r.t, r.era, r.rec, r.timing); err != nil {
			return fail("%v", err)
		}
		defer b.close()
		how = "two connections at once"
	}
	cnt := counter{l: a, r: r, count: op.Probe.Count}
	before, err := cnt.read(ctx)
	if err != nil {
		return fail("%v%s", err, setupNote(r))
	}
	args := toolCall(op, withKey(op, op.Probe.Arguments, probeKey()))
	var wg sync.WaitGroup
	answers := make([]inbound, 2)
	errs := make([]error, 2)
	start := make(chan struct{})
	for i, l := range []link{a, b} {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = l.call(ctx, mcp.MethodToolsCall, args, r.timing.Answer)
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fail("a racing call: %v", err)
		}
	}
	after, err := cnt.read(ctx)
	if err != nil {
		return fail("%v", err)
	}
	if n := cnt.executions(before, after); n != 1 {
		return fail("%s with one key executed %d times", how, n)
	}
	return pass("%s with one key executed once; they got %s and %s", how, describe(answers[0]), describe(answers[1]))
}

// maxGrowth bounds how much a stdio server's memory may grow while its
// client does not read.
const maxGrowth = 64 << 20

// Fixture 9. A client that stops reading a progress-heavy stream: others
// are still served, the final response still arrives (or the stream is
// cut with the refetch flag), and a local server's memory stays bounded.
func fixtureSlowConsumer(ctx context.Context, r *run) outcome {
	op := r.roles.flood
	if o, ok := r.listed(op, "tool with flood_arguments"); !ok {
		return o
	}
	if r.t.Transport() == "stdio" {
		return slowStdioConsumer(ctx, r, op)
	}
	p, err := newHTTP(ctx, r.t, r.era, r.rec, r.timing.Answer)
	if err != nil {
		return fail("%v", err)
	}
	defer p.close(ctx)
	c, err := p.callTool(ctx, op, op.Probe.Flood, newToken(1))
	if err != nil {
		return fail("%v", err)
	}
	s := c.s
	defer s.close()
	if o, ok := r.inFlight(ctx, c, op); !ok {
		return o
	}
	s.pause()
	r.rec.note("the probe stops reading the flooding stream for %v", r.timing.Pause)
	other, err := newHTTP(ctx, r.t, r.era, r.rec, r.timing.Answer)
	if err != nil {
		return fail("another client, while one does not read: %v", err)
	}
	defer other.close(ctx)
	began := time.Now()
	if _, err := other.call(ctx, r.heartbeat(), nil, r.timing.Answer); err != nil {
		return fail("another client, while one does not read: %v", err)
	}
	served := time.Since(began)
	time.Sleep(r.timing.Pause)
	s.resume()
	if m, ok := c.response(ctx, r.timing.Deadline); ok {
		return pass("another client was served in %v while one did not read; the reader's final response came (%s)",
			served.Round(time.Millisecond), describe(m)).with("other_served_ms", ms(served))
	}
	for _, m := range s.box.since(0) {
		if bytes.Contains(m.raw, []byte(mcp.MetaRefetch)) {
			return pass("another client was served in %v; the slow reader's stream was cut with the refetch flag", served.Round(time.Millisecond))
		}
	}
	return fail("the slow reader's final response never came, and no refetch flag said why (the stream %v)", s.box.endedWith())
}

func slowStdioConsumer(ctx context.Context, r *run, op *review.Operation) outcome {
	p, err := startStdio(ctx, r.t, r.era, r.rec, r.timing.Answer)
	if err != nil {
		return fail("%v", err)
	}
	defer p.close()
	c, err := stdioLink{p}.start(ctx, mcp.MethodToolsCall, toolCall(op, op.Probe.Flood), newToken(1), nil)
	if err != nil {
		return fail("%v", err)
	}
	if o, ok := r.inFlight(ctx, c, op); !ok {
		return o
	}
	p.pause()
	rss0, measured := p.rss()
	time.Sleep(r.timing.Pause)
	rss1, _ := p.rss()
	p.resume()
	m, ok := c.response(ctx, r.timing.Deadline)
	if !ok {
		return fail("after the probe read again, the final response did not come within %v", r.timing.Deadline)
	}
	out := pass("the final response came after the probe read again (%s)", describe(m))
	if measured {
		growth := rss1 - rss0
		out = out.with("rss_growth_bytes", growth)
		if growth > maxGrowth {
			return fail("while its client did not read for %v, the server's memory grew by %d MiB", r.timing.Pause, growth>>20).with("rss_growth_bytes", growth)
		}
		out.detail += fmt.Sprintf("; its memory grew %d KiB while unread", growth>>10)
	}
	return out
}

// Fixture 10. An SSE response has Content-Type text/event-stream,
// Cache-Control no-cache and X-Accel-Buffering no, its headers come
// before its first event, and a quiet stream carries keepalive comments.
// A server that answers with no stream at all gives it nothing to check:
// not applicable, never passed.
func fixtureSSEHeaders(ctx context.Context, r *run) outcome {
	if r.t.Transport() == "stdio" {
		return notApplicable("a Streamable HTTP fixture")
	}
	p, err := newHTTP(ctx, r.t, r.era, r.rec, r.timing.Answer)
	if err != nil {
		return fail("%v", err)
	}
	defer p.close(ctx)
	// A quiet stream first: the keepalive takes longest to see.
	var quiet *stream
	quietName := "the 2025 GET stream"
	if r.era == mcp.Modern {
		quietName = "subscriptions/listen"
		_, quiet, err = p.request(ctx, mcp.MethodListen, map[string]any{"notifications": map[string]any{"toolsListChanged": true}}, "", nil)
	} else {
		quiet, err = p.get(ctx, nil)
	}
	if err != nil {
		return fail("%v", err)
	}
	defer quiet.close()
	// problems fail the fixture; seen says what passed; unchecked, what
	// there was no stream to check.
	var problems, seen, unchecked []string
	check := func(s *stream, what string) {
		ct, cc, xa := s.header.Get("Content-Type"), s.header.Get("Cache-Control"), s.header.Get("X-Accel-Buffering")
		if !strings.Contains(strings.ToLower(cc), "no-cache") {
			problems = append(problems, fmt.Sprintf("%s: Cache-Control %q, want no-cache", what, cc))
		}
		if !strings.EqualFold(xa, "no") {
			if r.era == mcp.Modern {
				problems = append(problems, fmt.Sprintf("%s: X-Accel-Buffering %q, want no", what, xa))
			} else {
				seen = append(seen, what+" has no X-Accel-Buffering: no (the 2025 era does not ask for it)")
			}
		}
		seen = append(seen, what+": "+ct)
	}
	noStream := func(s *stream) string {
		return fmt.Sprintf("%s %s, not a stream", s.httpStatus(), cmp.Or(s.header.Get("Content-Type"), "(no Content-Type)"))
	}
	quietOK := quiet.status < 300 && quiet.sse()
	if quietOK {
		check(quiet, "the quiet stream")
	} else {
		unchecked = append(unchecked, fmt.Sprintf("%s was answered with %s: no quiet stream to watch for keepalives", quietName, noStream(quiet)))
	}
	if slow := r.roles.slow; slow != nil && r.tools[slow.Name] {
		c, err := p.callTool(ctx, slow, slow.Probe.Arguments, newToken(1))
		if err != nil {
			return fail("%v", err)
		}
		s := c.s
		switch _, _, ok := c.progress(ctx, 0, r.timing.Answer); {
		case ok:
			check(s, "the progress stream")
			headers, first := s.headers.Sub(s.started), s.firstAt.Sub(s.started)
			if first > 200*time.Millisecond && headers >= first-5*time.Millisecond {
				problems = append(problems, fmt.Sprintf("the headers came with the first event (%v), not before it", first.Round(time.Millisecond)))
			}
		case !s.sse():
			unchecked = append(unchecked, fmt.Sprintf("the call of %q was answered with %s", slow.Name, noStream(s)))
		default:
			unchecked = append(unchecked, fmt.Sprintf("the call of %q reported no progress within %v", slow.Name, r.timing.Answer))
		}
		s.close()
	}
	if quietOK {
		deadline := time.Now().Add(r.timing.Keepalive)
		for _, ok := quiet.keepalive(); time.Now().Before(deadline) && !ok && quiet.box.endedWith() == nil; _, ok = quiet.keepalive() {
			time.Sleep(100 * time.Millisecond) // the stream is read by its own goroutine
		}
		ka, ok := quiet.keepalive()
		at, ended := quiet.box.endedWhen()
		switch {
		case ok:
			seen = append(seen, fmt.Sprintf("a keepalive comment came %v into the quiet stream", ka.Sub(quiet.headers).Round(time.Millisecond)))
		case ended != nil:
			problems = append(problems, fmt.Sprintf("the quiet stream ended %v after its headers (%v), before any keepalive comment",
				at.Sub(quiet.headers).Round(time.Millisecond), ended))
		default:
			problems = append(problems, fmt.Sprintf("no keepalive comment on the quiet stream within %v", r.timing.Keepalive))
		}
	}
	if len(problems) > 0 {
		return fail("%s", strings.Join(problems, "; "))
	}
	if len(seen) == 0 {
		return notApplicable("no response was an SSE stream, so there is nothing to check: %s", strings.Join(unchecked, "; "))
	}
	return pass("%s", strings.Join(append(seen, unchecked...), "; "))
}

// Fixture 11. A cut subscriptions/listen stream is opened again with a
// new id (2026-07-28); 2025 resumption with Last-Event-ID works as
// advertised or is refused cleanly.
func fixtureReconnect(ctx context.Context, r *run) outcome {
	if r.era == mcp.Legacy {
		if r.t.Transport() == "stdio" {
			return notApplicable("over stdio the 2025 era has no stream to resume")
		}
		return resume2025(ctx, r)
	}
	l, err := open(ctx, r.t, r.era, r.rec, r.timing)
	if err != nil {
		return fail("%v", err)
	}
	defer l.close()
	listen := map[string]any{"notifications": map[string]any{"toolsListChanged": true}}
	first, err := l.start(ctx, mcp.MethodListen, listen, "", nil)
	if err != nil {
		return fail("%v", err)
	}
	if o, ok := r.subscribed(ctx, first, "subscriptions/listen"); !ok {
		if o.status == Failed {
			return o
		}
		return notApplicable("the server does not serve subscriptions/listen: %s", o.detail)
	}
	switch l := l.(type) {
	case stdioLink:
		l.p.notify(mcp.NotificationCancelled, map[string]any{"requestId": first.id, "reason": "mcprel probe: cut"})
	case httpLink:
		first.s.close()
	}
	second, err := l.start(ctx, mcp.MethodListen, listen, "", nil)
	if err != nil {
		return fail("%v", err)
	}
	if second.s != nil {
		defer second.s.close()
	}
	what := fmt.Sprintf("after the first stream was cut, a new subscriptions/listen (id %d)", second.id)
	if o, ok := r.subscribed(ctx, second, what); !ok {
		o.status = Failed
		return o
	}
	return pass("a cut subscriptions/listen was opened again under a new id, acknowledged, and stayed open")
}

// subscribed reports whether the subscriptions/listen call c was
// acknowledged and its stream stayed open: its first message is
// notifications/subscriptions/acknowledged, and neither a response nor
// the stream's end follows while the probe watches (its quiet wait). If
// not, the outcome says why: failed, or — the listen refused with an
// error — not applicable, with the error.
func (r *run) subscribed(ctx context.Context, c *call, what string) (outcome, bool) {
	m, _, ok := c.box.wait(ctx, c.from, r.timing.Answer, func(m inbound) bool {
		return m.msg.Method == mcp.NotificationSubscriptionAck || m.isResponseTo(c.id)
	})
	switch {
	case !ok && c.box.endedWith() != nil:
		return fail("%s ended (%v) with neither an acknowledgement nor an answer", what, c.box.endedWith()), false
	case !ok:
		return fail("%s was neither acknowledged nor answered within %v", what, r.timing.Answer), false
	case m.isResponseTo(c.id) && m.msg.Error != nil:
		return notApplicable("%s", errorText(m.msg.Error)), false
	case m.isResponseTo(c.id):
		return fail("%s was answered at once with a result (%s), not acknowledged with %s: no stream stayed open",
			what, clip(string(m.msg.Result), 120), mcp.NotificationSubscriptionAck), false
	}
	acked := m.at
	if end, _, ok := c.box.wait(ctx, c.from, r.timing.Quiet, func(m inbound) bool { return m.isResponseTo(c.id) }); ok {
		return fail("%s was acknowledged, then answered %v later (%s): the stream did not stay open",
			what, end.at.Sub(acked).Round(time.Millisecond), describe(end)), false
	}
	if at, err := c.box.endedWhen(); err != nil {
		return fail("%s was acknowledged, then its stream ended %v later (%v): it did not stay open",
			what, at.Sub(acked).Round(time.Millisecond), err), false
	}
	return outcome{}, true
}

func describeOr(m inbound, ok bool) string {
	if !ok {
		return "nothing came"
	}
	return describe(m)
}

func resume2025(ctx context.Context, r *run) outcome {
	slow := r.roles.slow
	if o, ok := r.listed(slow, "read that emits progress"); !ok {
		return o
	}
	p, err := newHTTP(ctx, r.t, r.era, r.rec, r.timing.Answer)
	if err != nil {
		return fail("%v", err)
	}
	defer p.close(ctx)
	c, err := p.callTool(ctx, slow, slow.Probe.Arguments, newToken(1))
	if err != nil {
		return fail("%v", err)
	}
	if o, ok := r.inFlight(ctx, c, slow); !ok {
		return o
	}
	id, s := c.id, c.s
	last := s.lastEventID()
	s.close()
	if last == "" {
		return notApplicable("the server's events carry no id: it offers no resumption, so there is nothing to resume")
	}
	g, err := p.get(ctx, map[string]string{mcp.HeaderLastEventID: last})
	if err != nil {
		return fail("resuming with Last-Event-ID %s: %v", last, err)
	}
	defer g.close()
	switch {
	case g.status >= 500:
		return fail("resuming with Last-Event-ID %s: HTTP %d", last, g.status)
	case g.status >= 400:
		return pass("resumption with Last-Event-ID was refused cleanly (HTTP %d)", g.status)
	}
	resumed := &call{id: id, token: newToken(1), box: g.box}
	if _, ok := resumed.response(ctx, r.timing.Deadline); ok {
		return pass("the stream resumed with Last-Event-ID %s and carried the call's response", last)
	}
	return fail("the stream resumed with Last-Event-ID %s (HTTP %d) but the call's response never came on it", last, g.status)
}

// Fixture 12. tasks/cancel is acknowledged, and the task stays
// non-terminal until it reaches a terminal status, which the probe polls
// for.
func fixtureTaskCancel(ctx context.Context, r *run) outcome {
	op := r.roles.task
	if o, ok := r.listed(op, "task-capable tool"); !ok {
		return o
	}
	l, err := open(ctx, r.t, r.era, r.rec, r.timing)
	if err != nil {
		return fail("%v", err)
	}
	defer l.close()
	members := toolCall(op, op.Probe.Arguments)
	var caps map[string]any
	if r.era == mcp.Modern {
		caps = map[string]any{"extensions": map[string]any{mcp.ExtensionTasks: map[string]any{}}}
	} else {
		members["task"] = map[string]any{"ttl": 60000}
	}
	c, err := l.start(ctx, mcp.MethodToolsCall, members, "", caps)
	if err != nil {
		return fail("%v", err)
	}
	m, ok := c.response(ctx, r.timing.Answer)
	if c.s != nil {
		c.s.close()
	}
	if !ok {
		return fail("the task-creating call was not answered within %v", r.timing.Answer)
	}
	if m.msg.Error != nil {
		return fail("creating a task of %q: %s", op.Name, errorText(m.msg.Error))
	}
	id := taskID(m.msg.Result)
	if id == "" {
		return notApplicable("%q answered at once, with no task: %s", op.Name, clip(string(m.msg.Result), 160))
	}
	taskCall := func(method string) (inbound, error) {
		return callCaps(ctx, l, method, map[string]any{"taskId": id}, caps, r.timing.Answer)
	}
	ack, err := taskCall("tasks/cancel")
	if err != nil {
		return fail("tasks/cancel: %v", err)
	}
	if ack.msg.Error != nil {
		return fail("tasks/cancel was refused: %s", errorText(ack.msg.Error))
	}
	var statuses []string
	deadline := time.Now().Add(r.timing.Deadline)
	for time.Now().Before(deadline) {
		g, err := taskCall("tasks/get")
		if err != nil {
			return fail("tasks/get: %v", err)
		}
		if g.msg.Error != nil {
			return fail("tasks/get after the cancel: %s", errorText(g.msg.Error))
		}
		st := taskStatus(g.msg.Result)
		if len(statuses) == 0 || statuses[len(statuses)-1] != st {
			statuses = append(statuses, st)
		}
		if terminal(st) {
			return pass("tasks/cancel was acknowledged; the task went %s", strings.Join(statuses, " → ")).with("statuses", statuses)
		}
		time.Sleep(200 * time.Millisecond) // the task's poll interval, at least
	}
	return fail("after tasks/cancel the task was still %s after %v", strings.Join(statuses, " → "), r.timing.Deadline)
}

// callCaps is a call that declares caps in the 2026-07-28 era.
func callCaps(ctx context.Context, l link, method string, members, caps map[string]any, timeout time.Duration) (inbound, error) {
	c, err := l.start(ctx, method, members, "", caps)
	if err != nil {
		return inbound{}, err
	}
	if c.s != nil {
		defer c.s.close()
	}
	m, ok := c.response(ctx, timeout)
	if !ok {
		return inbound{}, fmt.Errorf("no answer to %s within %v", method, timeout)
	}
	return m, nil
}

func taskID(result json.RawMessage) string {
	var r struct {
		TaskID string `json:"taskId"`
		Task   struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	json.Unmarshal(result, &r)
	if r.TaskID != "" {
		return r.TaskID
	}
	return r.Task.TaskID
}

func taskStatus(result json.RawMessage) string {
	var r struct {
		Status string `json:"status"`
	}
	json.Unmarshal(result, &r)
	return r.Status
}

func terminal(status string) bool {
	return status == "completed" || status == "failed" || status == "cancelled"
}

// oversize is the body the transport-security fixture sends: larger than
// any server should take in one request.
const oversize = 64 << 20

// Fixture 13. A foreign Origin (and, on a loopback URL, a foreign Host)
// is refused, an oversize body is refused and the server keeps serving,
// and a guessed session id gets nothing.
func fixtureTransportSecurity(ctx context.Context, r *run) outcome {
	if r.t.Transport() == "stdio" {
		return notApplicable("a Streamable HTTP fixture")
	}
	p, err := newHTTP(ctx, r.t, r.era, r.rec, r.timing.Answer)
	if err != nil {
		return fail("%v", err)
	}
	defer p.close(ctx)
	var problems, seen []string
	hb := requestFrame(900, r.heartbeat(), params(r.era, nil, "", nil))
	try := func(what string, extra map[string]string) {
		s, err := p.post(ctx, hb, r.heartbeat(), "", extra)
		if err != nil {
			seen = append(seen, what+": the connection was refused")
			return
		}
		s.close()
		if s.status < 400 {
			problems = append(problems, fmt.Sprintf("%s was not refused (%s)", what, s.httpStatus()))
			return
		}
		seen = append(seen, fmt.Sprintf("%s: HTTP %d", what, s.status))
	}
	try("a foreign Origin", map[string]string{"Origin": "http://probe.invalid"})
	if u, err := url.Parse(r.t.URL); err == nil && loopback(u.Hostname()) {
		try("a foreign Host", map[string]string{"Host": "probe.invalid:" + u.Port()})
	}
	if r.era == mcp.Legacy {
		try("a guessed session id", map[string]string{mcp.HeaderSessionID: "probe-" + rand.Text()})
	}
	big := append(append([]byte(`{"jsonrpc":"2.0","id":901,"method":"ping","params":{"pad":"`), bytes.Repeat([]byte("x"), oversize)...), `"}}`...)
	s, err := p.post(ctx, big, mcp.MethodPing, "", nil)
	switch {
	case err != nil:
		seen = append(seen, "a 64 MiB body: the connection was cut")
	case s.status < 400:
		s.close()
		problems = append(problems, fmt.Sprintf("a 64 MiB body was taken (HTTP %d)", s.status))
	default:
		s.close()
		seen = append(seen, fmt.Sprintf("a 64 MiB body: HTTP %d", s.status))
	}
	if _, err := p.call(ctx, r.heartbeat(), nil, r.timing.Answer); err != nil {
		problems = append(problems, "after the refusals the server stopped serving: "+err.Error())
	}
	if len(problems) > 0 {
		return fail("%s", strings.Join(problems, "; "))
	}
	return pass("%s; the server went on serving", strings.Join(seen, "; "))
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

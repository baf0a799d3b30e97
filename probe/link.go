package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/review"
)

// link is the probe's connection to the server in one era, over the
// target's transport, for the fixtures both transports share.
type link interface {
	// start sends a request and returns the call to wait on.
	start(ctx context.Context, method string, members map[string]any, token string, caps map[string]any) (*call, error)
	// call sends a request and waits for its response.
	call(ctx context.Context, method string, members map[string]any, timeout time.Duration) (inbound, error)
	close()
}

// call is one request in flight, and where its messages arrive.
type call struct {
	id    int64
	token string
	box   *mailbox
	from  int
	s     *stream // over HTTP, its response stream
}

// response waits for the call's response.
func (c *call) response(ctx context.Context, timeout time.Duration) (inbound, bool) {
	m, _, ok := c.box.wait(ctx, c.from, timeout, func(m inbound) bool { return m.isResponseTo(c.id) })
	return m, ok
}

// progress waits for the call's next progress report after index from.
func (c *call) progress(ctx context.Context, from int, timeout time.Duration) (float64, int, bool) {
	if from < c.from {
		from = c.from
	}
	m, next, ok := c.box.wait(ctx, from, timeout, func(m inbound) bool {
		tok, _, ok := m.progressOf()
		return ok && tok == c.token
	})
	if !ok {
		return 0, next, false
	}
	_, v, _ := m.progressOf()
	return v, next, true
}

// open connects to t in era: a fresh process for stdio, a fresh client
// (and 2025 session) for HTTP.
func open(ctx context.Context, t *Target, era mcp.Era, rec *recorder, timing Timing) (link, error) {
	if len(t.Command) > 0 {
		p, err := startStdio(ctx, t, era, rec, timing.Answer)
		if err != nil {
			return nil, err
		}
		return stdioLink{p}, nil
	}
	p, err := newHTTP(ctx, t, era, rec, timing.Answer)
	if err != nil {
		return nil, err
	}
	return httpLink{p}, nil
}

type stdioLink struct{ p *stdioPeer }

func (l stdioLink) start(ctx context.Context, method string, members map[string]any, token string, caps map[string]any) (*call, error) {
	from := l.p.box.count()
	id := l.p.id()
	err := l.p.write(requestFrame(id, method, params(l.p.era, members, token, caps)))
	return &call{id: id, token: token, box: l.p.box, from: from}, err
}

func (l stdioLink) call(ctx context.Context, method string, members map[string]any, timeout time.Duration) (inbound, error) {
	return l.p.call(ctx, method, members, timeout)
}

func (l stdioLink) close() { l.p.close() }

type httpLink struct{ p *httpPeer }

func (l httpLink) start(ctx context.Context, method string, members map[string]any, token string, caps map[string]any) (*call, error) {
	id, s, err := l.p.request(ctx, method, members, token, caps)
	if err != nil {
		return nil, err
	}
	return &call{id: id, token: token, box: s.box, s: s}, nil
}

func (l httpLink) call(ctx context.Context, method string, members map[string]any, timeout time.Duration) (inbound, error) {
	return l.p.call(ctx, method, members, timeout)
}

func (l httpLink) close() { l.p.close(context.Background()) }

// roles are the tools the policy lets the probe call, by what each
// fixture needs of one.
type roles struct {
	slow      *review.Operation // a read that emits progress, with arguments that run long
	stall     *review.Operation // a tool whose stall_arguments make no progress
	flood     *review.Operation // a tool whose flood_arguments send progress fast
	mutation  *review.Operation // a mutation with a read that counts it
	task      *review.Operation // a task-capable tool
	setup     []review.ProbeCall
	setupNote string // how the setup calls went, when one failed
}

// rolesOf picks, from the policy, the first tool that fits each role.
func rolesOf(p *review.Policy) (roles, error) {
	var rs roles
	if p == nil {
		return rs, nil
	}
	for i := range p.Operations {
		op := &p.Operations[i]
		if !op.Probe.Call {
			continue
		}
		kind := deref(op.Semantics.Kind)
		rs.setup = append(rs.setup, op.Probe.Setup...)
		switch {
		case rs.slow == nil && kind == "read-only" && deref(op.Progress.Emits) && op.Probe.Arguments != nil:
			rs.slow = op
		case rs.mutation == nil && kind == "mutation" && op.Probe.Count != nil:
			rs.mutation = op
		}
		if rs.stall == nil && op.Probe.Stall != nil {
			rs.stall = op
		}
		if rs.flood == nil && op.Probe.Flood != nil {
			rs.flood = op
		}
		if s := deref(op.Tasks.Support); rs.task == nil && (s == "optional" || s == "required") {
			rs.task = op
		}
	}
	return rs, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// toolCall is the params of a tools/call of op with args.
func toolCall(op *review.Operation, args map[string]any) map[string]any {
	if args == nil {
		args = map[string]any{}
	}
	return map[string]any{"name": op.Name, "arguments": args}
}

// listed says, for a fixture that needs op, whether the server lists it
// in this era: an outcome when it does not.
func (r *run) listed(op *review.Operation, role string) (outcome, bool) {
	if op == nil {
		return notApplicable("the policy names no %s for the probe to call", role), false
	}
	if !r.tools[op.Name] {
		return notApplicable("the server does not list %q (the policy's %s) in the %s era", op.Name, role, r.era.Version()), false
	}
	return outcome{}, true
}

// newToken is a progress token the fixture's call is asked to report on.
func newToken(n int) string { return "probe-" + strconv.Itoa(n) }

// jsonUnmarshal is json.Unmarshal, named for the fixtures' reading.
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// toolFailed reports whether a tools/call result says isError, and its
// text.
func toolFailed(m inbound) (bool, string) {
	var res struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(m.msg.Result, &res) != nil {
		return false, ""
	}
	text := ""
	if len(res.Content) > 0 {
		text = res.Content[0].Text
	}
	return res.IsError, text
}

// describe is a response in a few words, for a report.
func describe(m inbound) string {
	if m.msg.Error != nil {
		return "JSON-RPC error " + errorText(m.msg.Error)
	}
	if failed, text := toolFailed(m); failed {
		var body struct {
			Code string `json:"code"`
		}
		if json.Unmarshal([]byte(text), &body) == nil && body.Code != "" {
			return "a failed result (" + body.Code + ")"
		}
		return "a failed result: " + clip(text, 160)
	}
	return "a result"
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// ms is d in milliseconds, for measurements.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// inFlight waits for c's first progress report: once one came, the call
// is in flight (true). Otherwise the outcome says why not — not
// applicable when op answered first (its probe arguments run too short),
// failed when nothing came — and c's stream, if it has one, is closed.
func (r *run) inFlight(ctx context.Context, c *call, op *review.Operation) (outcome, bool) {
	if _, _, ok := c.progress(ctx, 0, r.timing.Answer); ok {
		return outcome{}, true
	}
	if c.s != nil {
		defer c.s.close()
	}
	if m, ok := c.response(ctx, 0); ok {
		return notApplicable("%q answered (%s) before it reported progress: give it probe arguments that run longer", op.Name, describe(m)), false
	}
	how := ""
	if c.s != nil {
		how = fmt.Sprintf(" (%s, %s)", c.s.httpStatus(), c.s.header.Get("Content-Type"))
	}
	return fail("%q reported no progress within %v%s", op.Name, r.timing.Answer, how), false
}

package probe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/review"
)

// Target is the server under test: a command the probe starts and speaks
// to over stdio, or a Streamable HTTP endpoint.
type Target struct {
	// Command is a stdio server's argv, run without a shell.
	Command []string
	// Env is added to the command's environment (KEY=VALUE).
	Env []string
	// URL is a Streamable HTTP endpoint.
	URL string
	// Header is sent with every HTTP request (a bearer token).
	Header http.Header
}

// String names the target in a report: its command or its URL, without
// credentials.
func (t *Target) String() string {
	if len(t.Command) > 0 {
		return strings.Join(t.Command, " ")
	}
	if u, err := url.Parse(t.URL); err == nil {
		u.User = nil
		u.RawQuery = ""
		return u.String()
	}
	return t.URL
}

// Transport is "stdio" or "streamable-http".
func (t *Target) Transport() string {
	if len(t.Command) > 0 {
		return "stdio"
	}
	return "streamable-http"
}

func (t *Target) check() error {
	switch {
	case len(t.Command) > 0 && t.URL != "":
		return errors.New("probe: give a command or a URL, not both")
	case len(t.Command) == 0 && t.URL == "":
		return errors.New("probe: give the server's command (stdio) or its URL (Streamable HTTP)")
	case t.URL != "":
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("probe: %q is not an http:// or https:// URL", t.URL)
		}
	}
	return nil
}

// UnreachableError says the server could not be reached at all: its
// command did not start, its URL did not answer, or it answered neither
// era's first request.
type UnreachableError struct {
	Target string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("probe: %s could not be reached: %v", e.Target, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Timing bounds the probe's waits. Zero fields take the defaults, which
// keep a run against one server under a minute.
type Timing struct {
	// Answer is how long a request may take to be answered (5 s).
	Answer time.Duration
	// Quiet is how long the probe watches for a message that must not
	// come — a response after a cancellation (500 ms).
	Quiet time.Duration
	// Deadline is the longest the probe waits for a stalled call to end
	// on the server's side (20 s).
	Deadline time.Duration
	// Keepalive is the longest it waits for a keepalive comment on a
	// quiet SSE stream (20 s).
	Keepalive time.Duration
	// Pause is how long the slow-consumer fixture stops reading (2 s).
	Pause time.Duration
}

func (t Timing) withDefaults() Timing {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.Answer, 5*time.Second)
	def(&t.Quiet, 500*time.Millisecond)
	def(&t.Deadline, 20*time.Second)
	def(&t.Keepalive, 20*time.Second)
	def(&t.Pause, 2*time.Second)
	return t
}

// Options configure a run. Target is required; the rest may be zero.
type Options struct {
	Target Target
	// Policy names the tools the probe may call, and how (review.Probe).
	// Without one the probe calls protocol methods only: ping, lists,
	// cancellations, the transport's headers.
	Policy *review.Policy
	Timing Timing
	// Only, when not empty, runs these fixtures (by number) alone.
	Only []int
	// OnResult, when set, is told of each result as its fixture ends.
	OnResult func(Result)
}

// Status is how a fixture ended.
type Status string

const (
	Passed        Status = "passed"
	Failed        Status = "failed"
	NotApplicable Status = "not_applicable"
)

// Result is one fixture's outcome in one era.
type Result struct {
	Fixture int    `json:"fixture"`
	Name    string `json:"name"`
	// Checks names the rule the fixture checks: the reliability
	// reviewer's checklist item, or the protocol's rule.
	Checks    string `json:"checks"`
	Transport string `json:"transport"`
	Era       string `json:"era,omitempty"`
	Status    Status `json:"status"`
	// Detail says what was seen: why it passed, what failed, or why the
	// fixture does not apply.
	Detail string `json:"detail"`
	// Measured holds what the fixture measured (a progress rate, a
	// deadline, a retry class).
	Measured map[string]any `json:"measured,omitempty"`
	// Frames is the evidence of a failure: the messages both ways.
	Frames []Frame       `json:"frames,omitempty"`
	Took   time.Duration `json:"took"`
}

// Report is a run's outcome.
type Report struct {
	Target    string   `json:"target"`
	Transport string   `json:"transport"`
	Eras      []string `json:"eras"`
	// ErasNotSpoken says, for each era the server was asked for and does
	// not speak, why not: "2026-07-28: …".
	ErasNotSpoken []string `json:"eras_not_spoken,omitempty"`
	// Deaths are the server's deaths the probe noticed: when, during
	// which fixtures, and how. The fixtures they touched say so.
	Deaths  []Death  `json:"deaths,omitempty"`
	Results []Result `json:"results"`
}

// Count returns how many results have status s.
func (r *Report) Count(s Status) int {
	n := 0
	for _, res := range r.Results {
		if res.Status == s {
			n++
		}
	}
	return n
}

// fixture is one of the probe's checks.
type fixture struct {
	n      int
	name   string
	checks string
	run    func(ctx context.Context, f *run) outcome
	// counts: the fixture counts a mutation's executions, so no other
	// such fixture may run beside it.
	counts bool
}

// outcome is what a fixture's run found.
type outcome struct {
	status   Status
	detail   string
	measured map[string]any
}

func pass(format string, args ...any) outcome {
	return outcome{status: Passed, detail: fmt.Sprintf(format, args...)}
}

func fail(format string, args ...any) outcome {
	return outcome{status: Failed, detail: fmt.Sprintf(format, args...)}
}

func notApplicable(format string, args ...any) outcome {
	return outcome{status: NotApplicable, detail: fmt.Sprintf(format, args...)}
}

func (o outcome) with(key string, v any) outcome {
	if o.measured == nil {
		o.measured = map[string]any{}
	}
	o.measured[key] = v
	return o
}

// run is one fixture's run in one era: what it may use.
type run struct {
	t      *Target
	era    mcp.Era
	timing Timing
	roles  roles
	rec    *recorder
	tools  map[string]bool // the tools the server lists in this era
}

// Run runs the fixtures against the target in every era it speaks, and
// reports each. It returns an *UnreachableError when the server answered
// neither era.
func Run(ctx context.Context, o *Options) (*Report, error) {
	if err := o.Target.check(); err != nil {
		return nil, err
	}
	timing := o.Timing.withDefaults()
	rs, err := rolesOf(o.Policy)
	if err != nil {
		return nil, err
	}
	rep := &Report{Target: o.Target.String(), Transport: o.Target.Transport()}
	var eras []mcp.Era
	tools := map[mcp.Era]map[string]bool{}
	var reasons []string
	for _, era := range []mcp.Era{mcp.Modern, mcp.Legacy} {
		listed, err := greet(ctx, &o.Target, era, timing)
		if err != nil {
			var ue *UnreachableError
			if errors.As(err, &ue) {
				return nil, err
			}
			reasons = append(reasons, fmt.Sprintf("%s: %v", era.Version(), err))
			continue
		}
		eras = append(eras, era)
		tools[era] = listed
		rep.Eras = append(rep.Eras, era.Version())
	}
	if len(eras) == 0 {
		return nil, &UnreachableError{Target: o.Target.String(), Err: errors.New(strings.Join(reasons, "; "))}
	}
	rep.ErasNotSpoken = reasons
	if len(rs.setup) > 0 {
		rs.setupNote = setup(ctx, &o.Target, eras[0], timing, rs.setup)
	}
	type job struct {
		fx  fixture
		era mcp.Era
	}
	var jobs []job
	for _, fx := range fixtures {
		if len(o.Only) > 0 && !slices.Contains(o.Only, fx.n) {
			continue
		}
		for _, era := range eras {
			jobs = append(jobs, job{fx, era})
		}
	}
	// Fixtures run a few at a time, each on connections (and processes)
	// of its own, so that the long waits — a keepalive, a deadline —
	// overlap; the ones that count a mutation's executions take turns.
	//
	// The server's death stops them: the fixtures running are told, and
	// no other starts.
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	v := newVitals(&o.Target, timing.Answer, stop)
	results := make([]Result, len(jobs))
	var counting sync.Mutex
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, parallel)
	for i, j := range jobs {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			if j.fx.counts {
				counting.Lock()
				defer counting.Unlock()
			}
			rec := newRecorder()
			rec.v, rec.label = v, fmt.Sprintf("%d %s (%s)", j.fx.n, j.fx.name, j.era.Version())
			r := &run{t: &o.Target, era: j.era, timing: timing, roles: rs, rec: rec, tools: tools[j.era]}
			began := time.Now()
			out := notApplicable("the run was stopped before this fixture")
			if d, dead := v.httpDeath(); dead {
				out = notApplicable("not run: %s", d)
			} else if ctx.Err() == nil {
				v.starts(rec)
				out = v.diedDuring(rec, j.fx.run(fctx, r))
				v.ends(rec)
			}
			res := Result{Fixture: j.fx.n, Name: j.fx.name, Checks: j.fx.checks, Transport: o.Target.Transport(), Era: j.era.Version(),
				Status: out.status, Detail: out.detail, Measured: out.measured, Took: time.Since(began).Round(time.Millisecond)}
			if out.status == Failed {
				res.Frames = r.rec.frames()
			}
			results[i] = res
			if o.OnResult != nil {
				mu.Lock()
				o.OnResult(res)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	rep.Results = results
	rep.Deaths = v.all()
	return rep, ctx.Err()
}

// parallel is how many fixtures run at once.
const parallel = 4

// greet asks the server for era's first answer — server/discover in the
// 2026-07-28 era, initialize in the 2025 era — and lists its tools. The
// 2026-07-28 era is the server's only when server/discover lists it in
// supportedVersions and the server then serves a 2026-07-28 request (the
// tools/list): a server that answers server/discover and refuses the
// version — as a stateful 2025 server may — speaks the 2025 era alone.
func greet(ctx context.Context, t *Target, era mcp.Era, timing Timing) (map[string]bool, error) {
	rec := newRecorder()
	l, err := open(ctx, t, era, rec, timing)
	if err != nil {
		return nil, err
	}
	defer l.close()
	if era == mcp.Modern {
		m, err := l.call(ctx, mcp.MethodDiscover, nil, timing.Answer)
		if err != nil {
			return nil, err
		}
		if m.msg.Error != nil {
			return nil, fmt.Errorf("server/discover: %s", errorText(m.msg.Error))
		}
		var d mcp.DiscoverResult
		if err := jsonUnmarshal(m.msg.Result, &d); err != nil {
			return nil, fmt.Errorf("server/discover's result: %v", err)
		}
		if !slices.Contains(d.SupportedVersions, mcp.Version20260728) {
			return nil, fmt.Errorf("server/discover lists supportedVersions %q, without %s", d.SupportedVersions, mcp.Version20260728)
		}
	}
	m, err := l.call(ctx, mcp.MethodToolsList, nil, timing.Answer)
	if err != nil {
		return nil, err
	}
	listed := map[string]bool{}
	if e := m.msg.Error; e != nil {
		if era == mcp.Modern && e.Code != jsonrpc.CodeMethodNotFound {
			return nil, fmt.Errorf("server/discover lists %s, but the server refused a %s tools/list: %s", mcp.Version20260728, mcp.Version20260728, errorText(e))
		}
		return listed, nil // no tools: the protocol fixtures still apply
	}
	var res mcp.ListToolsResult
	if err := jsonUnmarshal(m.msg.Result, &res); err == nil {
		for _, tl := range res.Tools {
			listed[tl.Name] = true
		}
	}
	return listed, nil
}

// setup makes the policy's setup calls once, and says how they went.
func setup(ctx context.Context, t *Target, era mcp.Era, timing Timing, calls []review.ProbeCall) string {
	l, err := open(ctx, t, era, newRecorder(), timing)
	if err != nil {
		return "setup: " + err.Error()
	}
	defer l.close()
	var notes []string
	for _, c := range calls {
		m, err := l.call(ctx, mcp.MethodToolsCall, map[string]any{"name": c.Tool, "arguments": c.Arguments}, timing.Answer)
		switch {
		case err != nil:
			notes = append(notes, c.Tool+": "+err.Error())
		case m.msg.Error != nil:
			notes = append(notes, c.Tool+": "+errorText(m.msg.Error))
		}
	}
	return strings.Join(notes, "; ")
}

// fixtures are the probe's checks, in order: each maps to the reliability
// reviewer's checklist or a rule of the protocol.
var fixtures = []fixture{
	{1, "cancel before completion", "checklist fixture 1; cancellation: no response for a cancelled request, none to the notification", fixtureCancelBeforeCompletion, false},
	{2, "late cancellation", "checklist fixture 2; race table: complete, then cancel", fixtureLateCancel, false},
	{3, "malformed and unknown cancellations", "cancellation: invalid notifications are ignored, fire and forget", fixtureBadCancellations, false},
	{4, "HTTP stream cancellation", "checklist fixture 3; Streamable HTTP: closing the stream cancels (2026-07-28), a POSTed cancel does and a dropped stream does not (2025)", fixtureStreamCancel, false},
	{5, "progress discipline", "checklist fixture 4; progress strictly increasing, never after the final response", fixtureProgress, false},
	{6, "deadlines", "deadline policy: whether a call without progress ends on the server's side, and how (no spec requires it: without a server deadline the client's must end it)", fixtureDeadline, false},
	{7, "duplicate mutation", "checklist fixtures 5, 6, 7: retry class, key replay, key reuse with other arguments", fixtureDuplicateMutation, true},
	{8, "concurrent duplicates", "checklist fixture 11: two connections race one key", fixtureRaceOneKey, true},
	{9, "slow consumer", "checklist fixture 8; flow control: bounded queues, the final response kept", fixtureSlowConsumer, false},
	{10, "SSE stream headers", "flow control: text/event-stream, no-cache, X-Accel-Buffering, flushed headers, keepalive", fixtureSSEHeaders, false},
	{11, "reconnect", "checklist fixture 9; reconnect plan: a new stream with a new id, no Last-Event-ID in 2026-07-28", fixtureReconnect, false},
	{12, "tasks/cancel", "checklist fixture 10; durable tasks: the cancel is an acknowledged intent, polled to a terminal status", fixtureTaskCancel, false},
	{13, "transport security", "Streamable HTTP: Origin/Host validated (DNS rebinding), bodies bounded, sessions unguessable", fixtureTransportSecurity, false},
}

// Fixtures lists the fixtures' numbers and names, in order.
func Fixtures() []string {
	out := make([]string, len(fixtures))
	for i, f := range fixtures {
		out[i] = fmt.Sprintf("%d %s", f.n, f.name)
	}
	return out
}

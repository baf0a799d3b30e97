package review

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Policy is what a reviewer is told about one or more MCP operations: the
// input of Review. Every field that describes the operation is a pointer
// (or a type with a Set flag) so that an input the author did not give is
// told apart from one given as false, zero or "none": a missing input is
// asked for by name, never guessed. docs/review.md documents every field.
type Policy struct {
	// Operations are reviewed one by one; the report's verdict is
	// "production ready" only when every one of them is.
	Operations []Operation `yaml:"operations" json:"operations"`
}

// Operation describes one MCP operation (a tool, usually) from the
// request's start to its recovery after a failure.
type Operation struct {
	// Name names the operation (the tool's name).
	Name string `yaml:"name" json:"name"`
	// Transport is "stdio" or "streamable-http".
	Transport *string `yaml:"transport" json:"transport"`
	// Eras lists the protocol versions clients use: "2026-07-28",
	// "2025-11-25", "2025-06-18", "2025-03-26". Absent: the report shows
	// the wire of both eras (2026-07-28 and 2025).
	Eras []string `yaml:"eras" json:"eras"`
	// Semantics says what the operation does.
	Semantics Semantics `yaml:"semantics" json:"semantics"`
	// Deadlines are the operation's two clocks.
	Deadlines Deadlines `yaml:"deadlines" json:"deadlines"`
	// Progress is how the operation reports progress and what it resets.
	Progress Progress `yaml:"progress" json:"progress"`
	// Retry is the client's retry policy for the operation.
	Retry Retry `yaml:"retry" json:"retry"`
	// Idempotency is the business deduplication of a mutation.
	Idempotency Idempotency `yaml:"idempotency" json:"idempotency"`
	// Results says what callers get back.
	Results Results `yaml:"results" json:"results"`
	// FlowControl bounds what the server queues for a slow reader.
	FlowControl FlowControl `yaml:"flow_control" json:"flow_control"`
	// SSE is the Streamable HTTP stream's settings (streamable-http only).
	SSE SSE `yaml:"sse" json:"sse"`
	// Reconnect is what the client does after a broken stream or a dead
	// process.
	Reconnect Reconnect `yaml:"reconnect" json:"reconnect"`
	// Tasks is the operation's durable Task behaviour.
	Tasks Tasks `yaml:"tasks" json:"tasks"`
	// Probe says whether mcprel probe may call the operation, and how.
	// The reviewer does not read it.
	Probe Probe `yaml:"probe" json:"probe"`
	// Auth is what a caller must hold to run the operation. The reviewer
	// does not read it; mcprel gateway enforces it.
	Auth Auth `yaml:"auth" json:"auth"`
}

// Auth is what an operation asks of its caller's credentials.
type Auth struct {
	// Scopes are the OAuth scopes a call needs, beyond those every
	// request needs (--oauth-scopes): a call whose access token lacks
	// one is refused 403 insufficient_scope, the challenge naming them
	// all. They need an OAuth-protected listener (--oauth-issuer).
	Scopes []string `yaml:"scopes" json:"scopes"`
}

// Probe is what mcprel probe may do with an operation (a tool) on a live
// server. Nothing in a tool's listing says whether calling it charges a
// card: the probe calls only a tool whose Probe says Call, with the
// arguments given here, and reads what the rest of the operation's policy
// says of it (semantics.kind, progress.emits, idempotency.key and
// key_argument, tasks.support, deadlines) to choose its fixtures.
type Probe struct {
	// Call lets the probe call the tool.
	Call bool `yaml:"call" json:"call"`
	// Arguments are the call's arguments. For a read that emits progress,
	// they make a call long enough to be cancelled midway: several
	// seconds, a report at least every second. For a mutation they are
	// the operation each fixture sends (its idempotency key is the
	// probe's to add). For a task-capable tool, a task that runs a few
	// seconds at least.
	Arguments map[string]any `yaml:"arguments" json:"arguments"`
	// Stall are arguments with which a call makes no progress for longer
	// than the operation's deadlines: whether the server's own deadline
	// ends it is what the deadline fixture finds out.
	Stall map[string]any `yaml:"stall_arguments" json:"stall_arguments"`
	// Flood are arguments with which a call sends progress as fast as it
	// can, for the slow-consumer fixture.
	Flood map[string]any `yaml:"flood_arguments" json:"flood_arguments"`
	// Count is the read that counts a mutation's executions.
	Count *ProbeCount `yaml:"count" json:"count"`
	// Setup are calls the probe makes once, before the fixtures that
	// call this tool (creating what a mutation acts on).
	Setup []ProbeCall `yaml:"setup" json:"setup"`
}

// ProbeCount is a read whose result holds a number that each execution
// of a mutation moves by Step: the probe reads it before and after, and
// counts the executions between.
type ProbeCount struct {
	// Tool is the read, which the probe may always call.
	Tool      string         `yaml:"tool" json:"tool"`
	Arguments map[string]any `yaml:"arguments" json:"arguments"`
	// Field is the number's member in the result's structuredContent
	// (or in its first text content, parsed as a JSON object); dots
	// reach into nested objects.
	Field string `yaml:"field" json:"field"`
	// Step is how much one execution moves it: -1 for a stock that each
	// reservation takes one from. Zero means 1.
	Step float64 `yaml:"step" json:"step"`
}

// ProbeCall is one call the probe makes as told.
type ProbeCall struct {
	Tool      string         `yaml:"tool" json:"tool"`
	Arguments map[string]any `yaml:"arguments" json:"arguments"`
}

// Semantics is what the operation does to the world.
type Semantics struct {
	// Kind is "read-only" (the application's contract proves no side
	// effect) or "mutation". Tool annotations (readOnlyHint) are not this
	// contract.
	Kind *string `yaml:"kind" json:"kind"`
	// ExternalEffect is true when the effect reaches beyond the
	// operation's own database: a payment provider, an e-mail, another
	// service.
	ExternalEffect *bool `yaml:"external_effect" json:"external_effect"`
	// Description is free text for the report.
	Description string `yaml:"description" json:"description"`
}

// Deadlines are the idle and the maximum timeout.
type Deadlines struct {
	// Idle is the longest the call may go without valid progress.
	Idle *Duration `yaml:"idle_timeout" json:"idle_timeout"`
	// Max is the longest the call may run, progress or not; "none" is an
	// answer, and a refusal.
	Max *Duration `yaml:"max_timeout" json:"max_timeout"`
}

// Progress is the operation's progress-token behaviour.
type Progress struct {
	// Emits says whether the operation sends notifications/progress when
	// the request carries a progress token.
	Emits *bool `yaml:"emits" json:"emits"`
	// StrictlyIncreasing says whether progress values always increase
	// (and whether a repeated or decreasing value is dropped by the
	// receiver). Required when Emits.
	StrictlyIncreasing *bool `yaml:"strictly_increasing" json:"strictly_increasing"`
	// RateLimit is the shortest interval between two progress
	// notifications of one request ("none": unlimited). Required when
	// Emits.
	RateLimit *Duration `yaml:"rate_limit" json:"rate_limit"`
	// ResetsIdle says whether valid progress resets the idle clock.
	ResetsIdle *bool `yaml:"resets_idle_deadline" json:"resets_idle_deadline"`
	// ResetsMax says whether progress resets the maximum deadline too:
	// true is a refusal (a progress token would make the call immortal).
	ResetsMax *bool `yaml:"resets_max_deadline" json:"resets_max_deadline"`
}

// Retry is the client's retry policy.
type Retry struct {
	// Policy is "never", "safe_only" (retry only what the review classes
	// SAFE), "same_key_same_args" (retry with the same idempotency key and
	// the same arguments), "same_version" (a versioned write retried with
	// the same expected version) or "retry_on_timeout" (retry whenever a
	// call times out: a refusal, for it says nothing about deduplication).
	Policy *string `yaml:"policy" json:"policy"`
	// MaxAttempts bounds the attempts, the first included (optional).
	MaxAttempts *int `yaml:"max_attempts" json:"max_attempts"`
	// ReconcileWith names the read that finds an operation's outcome
	// (by its key, or the authoritative state) before an unsafe retry
	// (optional).
	ReconcileWith string `yaml:"reconcile_with" json:"reconcile_with"`
}

// Idempotency is a mutation's business deduplication.
type Idempotency struct {
	// Key is "required", "optional" (calls without one run every time and
	// are UNSAFE), "none", or "version" (a versioned compare-and-set write
	// whose expected version refuses to apply twice).
	Key *string `yaml:"key" json:"key"`
	// Store is where the deduplication is recorded.
	Store Store `yaml:"store" json:"store"`
	// Transaction says what lies inside the store's one atomic
	// transaction.
	Transaction Transaction `yaml:"transaction" json:"transaction"`
	// ExternalGuard is how an external effect is kept to one execution:
	// "none", "outbox" (a transactional outbox row written in the
	// transaction), "upstream_key" (the provider enforces the same key) or
	// "at_most_once" (the key is claimed before the effect and never sent
	// twice, for a provider that enforces nothing: an answer lost leaves
	// the outcome unknown — what mcprel gateway does in front of an MCP
	// server without idempotency). Required when Semantics.ExternalEffect.
	ExternalGuard *string `yaml:"external_effect_guard" json:"external_effect_guard"`
	// KeyArgument names the argument that carries the key (optional;
	// default "idempotencyKey"). The key may also come in
	// _meta["dev.mcprel/idempotencyKey"].
	KeyArgument string `yaml:"key_argument" json:"key_argument"`
}

// Store is the idempotency store.
type Store struct {
	// Kind is "none", "process-memory", "sqlite", "postgres" or
	// "upstream" (the provider itself deduplicates by key).
	Kind *string `yaml:"kind" json:"kind"`
	// Durable says whether a record survives a crash and a restart.
	Durable *bool `yaml:"durable" json:"durable"`
	// SharedByReplicas says whether every replica serving the operation
	// sees the same records.
	SharedByReplicas *bool `yaml:"shared_by_replicas" json:"shared_by_replicas"`
	// Replicas is how many processes serve the operation (optional;
	// default 1).
	Replicas *int `yaml:"replicas" json:"replicas"`
}

// Transaction says which of the four parts of a keyed operation commit in
// one transaction.
type Transaction struct {
	KeyClaim            *bool `yaml:"key_claim" json:"key_claim"`
	ArgumentFingerprint *bool `yaml:"argument_fingerprint" json:"argument_fingerprint"`
	EffectRecord        *bool `yaml:"effect_record" json:"effect_record"`
	Result              *bool `yaml:"result" json:"result"`
}

// Results says what a caller gets back.
type Results struct {
	// ReturnedRecords is "defensive-copy" (each caller gets its own copy,
	// or one rebuilt from stored bytes) or "aliased" (the caller's value
	// shares memory with the store's record: a refusal).
	ReturnedRecords *string `yaml:"returned_records" json:"returned_records"`
}

// FlowControl bounds the outbound queue.
type FlowControl struct {
	// QueueCapacity is the messages one stream (or client) may hold
	// queued; "unbounded" is a refusal, as is leaving it out.
	QueueCapacity *Capacity `yaml:"queue_capacity" json:"queue_capacity"`
	// QueueScope is "per-stream" or "per-client".
	QueueScope *string `yaml:"queue_scope" json:"queue_scope"`
	// ProgressOverflow is what happens to progress that does not fit:
	// "coalesce", "drop-oldest", "drop-newest" or "block".
	ProgressOverflow *string `yaml:"progress_overflow" json:"progress_overflow"`
	// RefetchFlag says whether dropped progress is flagged so that the
	// client refetches from the authoritative source.
	RefetchFlag *bool `yaml:"refetch_flag" json:"refetch_flag"`
	// FinalResponsePreserved says whether the final JSON-RPC response is
	// never dropped.
	FinalResponsePreserved *bool `yaml:"final_response_preserved" json:"final_response_preserved"`
}

// SSE is the Streamable HTTP response stream.
type SSE struct {
	// Headers lists the SSE response headers, "Name: value".
	Headers []string `yaml:"headers" json:"headers"`
	// ProxyBuffering is "off", "on" or "unknown" for the proxies between
	// client and server.
	ProxyBuffering *string `yaml:"proxy_buffering" json:"proxy_buffering"`
	// KeepaliveInterval is the cadence of SSE comment lines on quiet
	// streams ("none": no keepalive).
	KeepaliveInterval *Duration `yaml:"keepalive_interval" json:"keepalive_interval"`
	// KeepaliveResetsIdle says whether a keepalive counts as progress
	// (it must not).
	KeepaliveResetsIdle *bool `yaml:"keepalive_resets_idle" json:"keepalive_resets_idle"`
}

// Reconnect is the client's plan after a broken stream.
type Reconnect struct {
	BackoffInitial *Duration `yaml:"backoff_initial" json:"backoff_initial"`
	BackoffCap     *Duration `yaml:"backoff_cap" json:"backoff_cap"`
	// Jitter is "full", "equal" or "none".
	Jitter *string `yaml:"jitter" json:"jitter"`
	// LastEventID is "never", "legacy-only" (2025 streams only) or
	// "always". streamable-http only.
	LastEventID *string `yaml:"last_event_id" json:"last_event_id"`
	// Refetch says whether the client refetches affected resources,
	// lists, prompts or Tasks after reconnecting.
	Refetch *bool `yaml:"refetch" json:"refetch"`
	// ReplaysUnsafeMutations says whether the client re-sends an UNSAFE
	// call automatically after reconnecting (it must not).
	ReplaysUnsafeMutations *bool `yaml:"replays_unsafe_mutations" json:"replays_unsafe_mutations"`
}

// Tasks is the durable Task behaviour.
type Tasks struct {
	// Support is "none", "optional" or "required".
	Support *string `yaml:"support" json:"support"`
	// Cancel is "cooperative" (tasks/cancel records intent; the task
	// stays working until a checkpoint observes it) or "immediate".
	Cancel *string `yaml:"cancel" json:"cancel"`
	// Durable says whether task state is stored before the create
	// response and outlives connections and processes.
	Durable *bool `yaml:"durable" json:"durable"`
	// PollUntilTerminal says whether the client polls (or listens) until
	// the task is terminal after a cancel acknowledgement.
	PollUntilTerminal *bool `yaml:"poll_until_terminal" json:"poll_until_terminal"`
}

// Duration is a duration written as text ("30s", "5m", "1h30m") or
// "none" for no limit.
type Duration struct {
	D    time.Duration
	None bool
}

// String returns the duration as written, or "none".
func (d Duration) String() string {
	if d.None {
		return "none"
	}
	return d.D.String()
}

func parseDuration(s string) (Duration, error) {
	switch strings.TrimSpace(strings.ToLower(s)) {
	case "none", "never", "unbounded", "unlimited", "off":
		return Duration{None: true}, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return Duration{}, fmt.Errorf("%q has no unit: write a duration such as \"30s\" or \"5m\"", s)
		}
		return Duration{}, fmt.Errorf("%q is not a duration such as \"30s\", \"5m\" or \"none\"", s)
	}
	if d <= 0 {
		return Duration{}, fmt.Errorf("%q must be positive (write \"none\" for no limit)", s)
	}
	return Duration{D: d}, nil
}

// UnmarshalYAML reads a duration scalar.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a duration must be a string such as \"30s\"", n.Line)
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	*d = v
	return nil
}

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration must be a string such as \"30s\", not %s", b)
	}
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalJSON writes the duration as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// MarshalYAML writes the duration as text.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// Capacity is a queue capacity: a positive count of messages or
// "unbounded".
type Capacity struct {
	N         int
	Unbounded bool
}

// String returns the count or "unbounded".
func (c Capacity) String() string {
	if c.Unbounded {
		return "unbounded"
	}
	return strconv.Itoa(c.N)
}

func parseCapacity(s string) (Capacity, error) {
	switch strings.TrimSpace(strings.ToLower(s)) {
	case "unbounded", "unlimited", "none", "infinite":
		return Capacity{Unbounded: true}, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n <= 0 {
		return Capacity{}, fmt.Errorf("%q is not a capacity: write a positive number of messages, or \"unbounded\"", s)
	}
	return Capacity{N: n}, nil
}

// UnmarshalYAML reads a capacity scalar.
func (c *Capacity) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a capacity must be a number or \"unbounded\"", n.Line)
	}
	v, err := parseCapacity(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	*c = v
	return nil
}

// UnmarshalJSON reads a capacity number or string.
func (c *Capacity) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(b, `"`))
	v, err := parseCapacity(s)
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// MarshalJSON writes a count as a number, unbounded as a string.
func (c Capacity) MarshalJSON() ([]byte, error) {
	if c.Unbounded {
		return []byte(`"unbounded"`), nil
	}
	return []byte(strconv.Itoa(c.N)), nil
}

// MarshalYAML writes the capacity as Capacity.String does.
func (c Capacity) MarshalYAML() (any, error) {
	if c.Unbounded {
		return "unbounded", nil
	}
	return c.N, nil
}

// The values the enumerated fields accept.
var enums = map[string][]string{
	"transport":                         {"stdio", "streamable-http"},
	"eras":                              {"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"},
	"semantics.kind":                    {"read-only", "mutation"},
	"retry.policy":                      {"never", "safe_only", "same_key_same_args", "same_version", "retry_on_timeout"},
	"idempotency.key":                   {"required", "optional", "none", "version"},
	"idempotency.store.kind":            {"none", "process-memory", "sqlite", "postgres", "upstream"},
	"idempotency.external_effect_guard": {"none", "outbox", "upstream_key", "at_most_once"},
	"results.returned_records":          {"defensive-copy", "aliased"},
	"flow_control.queue_scope":          {"per-stream", "per-client"},
	"flow_control.progress_overflow":    {"coalesce", "drop-oldest", "drop-newest", "block"},
	"sse.proxy_buffering":               {"off", "on", "unknown"},
	"reconnect.jitter":                  {"full", "equal", "none"},
	"reconnect.last_event_id":           {"never", "legacy-only", "always"},
	"tasks.support":                     {"none", "optional", "required"},
	"tasks.cancel":                      {"cooperative", "immediate"},
}

// Parse reads a policy from YAML or JSON. JSON is chosen by the name's
// extension (.json) or, without one, by a document that starts with "{".
// Unknown fields and bad values are errors that name the field (and, in
// YAML, the line).
func Parse(name string, data []byte) (*Policy, error) {
	var p Policy
	ext := strings.ToLower(filepath.Ext(name))
	isJSON := ext == ".json" || (ext != ".yaml" && ext != ".yml" && bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")))
	if isJSON {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", name, lineAt(data, dec.InputOffset()), err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, fmt.Errorf("%s: more than one JSON document", name)
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&p); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%s: the policy is empty", name)
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &p, nil
}

func lineAt(data []byte, off int64) int {
	off = min(off, int64(len(data)))
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// validate checks what decoding cannot: names present and unique, and each
// enumerated field one of its values. Whether required inputs are present
// is Review's to say, not an error.
func (p *Policy) validate() error {
	if len(p.Operations) == 0 {
		return errors.New("the policy lists no operations (want \"operations:\" with at least one)")
	}
	seen := map[string]bool{}
	for i, op := range p.Operations {
		at := fmt.Sprintf("operations[%d]", i)
		if op.Name == "" {
			return fmt.Errorf("%s: name is required", at)
		}
		if seen[op.Name] {
			return fmt.Errorf("%s: operation %q is listed twice", at, op.Name)
		}
		seen[op.Name] = true
		for field, v := range op.enumValues() {
			if v != nil && !slices.Contains(enums[field], *v) {
				return fmt.Errorf("%s (%s): %s: %q is not one of %s", at, op.Name, field, *v, strings.Join(enums[field], ", "))
			}
		}
		for _, e := range op.Eras {
			if !slices.Contains(enums["eras"], e) {
				return fmt.Errorf("%s (%s): eras: %q is not one of %s", at, op.Name, e, strings.Join(enums["eras"], ", "))
			}
		}
		if r := op.Idempotency.Store.Replicas; r != nil && *r < 1 {
			return fmt.Errorf("%s (%s): idempotency.store.replicas must be at least 1, not %d", at, op.Name, *r)
		}
		if m := op.Retry.MaxAttempts; m != nil && *m < 1 {
			return fmt.Errorf("%s (%s): retry.max_attempts must be at least 1, not %d", at, op.Name, *m)
		}
		if err := op.Probe.validate(); err != nil {
			return fmt.Errorf("%s (%s): probe: %w", at, op.Name, err)
		}
	}
	return nil
}

// validate checks that what the probe is told to call names a tool.
func (pr *Probe) validate() error {
	if c := pr.Count; c != nil && (c.Tool == "" || c.Field == "") {
		return errors.New("count needs a tool and a field")
	}
	for i, c := range pr.Setup {
		if c.Tool == "" {
			return fmt.Errorf("setup[%d] needs a tool", i)
		}
	}
	return nil
}

// enumValues maps each enumerated field's path to its value.
func (op *Operation) enumValues() map[string]*string {
	return map[string]*string{
		"transport":                         op.Transport,
		"semantics.kind":                    op.Semantics.Kind,
		"retry.policy":                      op.Retry.Policy,
		"idempotency.key":                   op.Idempotency.Key,
		"idempotency.store.kind":            op.Idempotency.Store.Kind,
		"idempotency.external_effect_guard": op.Idempotency.ExternalGuard,
		"results.returned_records":          op.Results.ReturnedRecords,
		"flow_control.queue_scope":          op.FlowControl.QueueScope,
		"flow_control.progress_overflow":    op.FlowControl.ProgressOverflow,
		"sse.proxy_buffering":               op.SSE.ProxyBuffering,
		"reconnect.jitter":                  op.Reconnect.Jitter,
		"reconnect.last_event_id":           op.Reconnect.LastEventID,
		"tasks.support":                     op.Tasks.Support,
		"tasks.cancel":                      op.Tasks.Cancel,
	}
}

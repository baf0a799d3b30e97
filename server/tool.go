package server

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/big"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// Tool describes a tool to register.
type Tool struct {
	// Name is what clients call the tool: 1 to 128 characters from
	// [A-Za-z0-9_.-].
	Name        string
	Title       string
	Description string
	// InputSchema is the JSON Schema (2020-12 unless it says otherwise) of
	// the arguments; its root must be of type "object". AddTypedTool infers
	// it from the argument type when it is nil; AddTool uses an empty
	// object schema.
	InputSchema json.RawMessage
	// OutputSchema, if set, describes structuredContent. AddTypedTool
	// infers it from a struct result type when it is nil.
	OutputSchema json.RawMessage
	// Annotations are hints for clients. They are never proof of anything.
	Annotations *mcp.ToolAnnotations
	Meta        mcp.Meta
	// Execution is what the 2025-11-25 era's tools/list says of the tool's
	// task support; an interceptor that runs the tool as a task sets it.
	// The 2026-07-28 era's tools/list leaves it out.
	Execution *mcp.ToolExecution
	// Policy is how the server runs the tool's calls.
	Policy Policy
	// Unchecked, when set, leaves the call's arguments to the handler:
	// the server does not judge them by InputSchema. For a handler that
	// hands them on to a judge of their own — a gateway's upstream, whose
	// schema this server's validator may read differently and which may
	// supply arguments from elsewhere (an idempotency key in _meta). The
	// schema is listed as given, and one this server's validator cannot
	// compile is served all the same (its root must still be an object).
	Unchecked bool
	// Check, when set, runs as soon as a call arrives: before its
	// arguments are judged by the input schema and before it waits for
	// admission, on the goroutine that read it. An error refuses the call
	// at once, mapped as ToolHandler's errors are. The context it returns
	// is the one the call's handler runs in (a Check hands what it found
	// to its interceptor's handler there, rather than finding it twice).
	// It must be quick and must not block. A Check reads the arguments
	// with CallRequest.DecodedArguments, and may SupplyArgument and
	// NarrowRetry; interceptors chain their checks here.
	Check func(ctx context.Context, call *CallRequest) (context.Context, error)

	srv   *Server // while AddTool runs its interceptors
	marks []any   // what the policies that wrapped it so far marked it with
}

// Server returns the server the tool is being registered with, for a
// policy (a ToolInterceptor) that needs its logger or its deadlines
// (Server.Deadlines); nil outside AddTool.
func (t *Tool) Server() *Server { return t.srv }

// Policy is a tool's reliability policy: how its calls are admitted, and
// (as the runtime grows) its deadlines, idempotency and task support. The
// zero value is conservative: the server-wide limits apply and nothing
// else is promised.
type Policy struct {
	// MaxConcurrent bounds how many calls of this tool run at once, within
	// the server's MaxConcurrentCalls. Calls past it wait in the tool's own
	// queue, so a slow tool cannot take every slot from the others. Zero
	// means only the server-wide limit applies.
	MaxConcurrent int
	// MaxQueued bounds how many calls of this tool may wait for a slot;
	// past it (or past the server's MaxQueuedCalls) calls are refused at
	// once with a retryable overload error. Zero means only the
	// server-wide bound applies.
	MaxQueued int

	// Rate, when positive, is the tool's sustained calls per second across
	// all clients, Burst how many may come at once (at least 1); calls
	// over it are refused with a retryable rate-limit error.
	Rate  float64
	Burst int

	// Timeout is the tool's kind of work, which picks its default
	// deadlines (see TimeoutClass).
	Timeout TimeoutClass
	// IdleTimeout and MaxTimeout override the class's deadlines; zero
	// keeps the default. A TimeoutLong tool must set MaxTimeout.
	IdleTimeout time.Duration
	MaxTimeout  time.Duration

	// Secret lists arguments whose values are never written anywhere the
	// server writes about its calls (the request log line, an observer's
	// ArgumentSummary): a password, a token, personal data. They show as
	// [secret].
	Secret []string

	// Retry is what a client may do after a call fails without an answer
	// (see RetryClass). The zero value is RetryUnsafe; an interceptor that
	// makes the tool idempotent (package idempotency) sets
	// RetryConditional.
	Retry mcp.RetryClass

	// Group, when set, is a share of the server the tool's calls draw on
	// together with the other tools of the group (see LimitGroup).
	Group *LimitGroup

	// Waits says the handler spends its call waiting on something else
	// (another server: a gateway's upstream), not computing. A transport
	// that runs a call on its reading goroutine for a moment before it
	// hands reading to another (stdio) starts such a call on a goroutine
	// of its own at once, so that the next request is read without
	// waiting for the handoff.
	Waits bool
}

func (p Policy) validate(tool string) error {
	if p.MaxConcurrent < 0 || p.MaxQueued < 0 || p.IdleTimeout < 0 || p.MaxTimeout < 0 || p.Rate < 0 || p.Burst < 0 {
		return fmt.Errorf("server: tool %q: Policy limits and timeouts must not be negative", tool)
	}
	if p.Timeout > TimeoutLong {
		return fmt.Errorf("server: tool %q: unknown timeout class %d", tool, p.Timeout)
	}
	if p.Retry > mcp.RetrySafe {
		return fmt.Errorf("server: tool %q: unknown retry class %d", tool, p.Retry)
	}
	if p.Timeout == TimeoutLong && p.MaxTimeout == 0 {
		return fmt.Errorf("server: tool %q: long-running work belongs in a durable task (package taskserver); a call must set Policy.MaxTimeout to bound it", tool)
	}
	return nil
}

// ToolHandler runs one call of a tool. ctx ends when the call is cancelled,
// times out, or its connection closes; context.Cause(ctx) says which (see
// ErrPeerCancelled and the other causes). A handler should return promptly
// once ctx is done: whatever it returns then is discarded.
//
// Errors map to the wire in one documented way:
//   - nil error: the result is sent as is (nil means an empty result);
//   - an error wrapping *mcp.ToolError: a result with isError set and the
//     error's structured body, for the model to act on;
//   - an error wrapping *jsonrpc.Error: a JSON-RPC error response (a
//     protocol failure, not a tool failure);
//   - any other error: a result with isError set, code "tool_error" and
//     the error's text as the message.
//
// A panic in a handler is recovered and reported as code "internal_error";
// the server keeps serving.
type ToolHandler func(ctx context.Context, req *CallRequest) (*mcp.CallToolResult, error)

type registeredTool struct {
	def     mcp.Tool
	policy  Policy
	schema  *jsonschema.Resolved
	output  *jsonschema.Resolved // nil when the tool declares no output schema, or one that does not compile
	headers []headerParam
	props   map[string]bool // the arguments the input schema declares
	flat    *flatSchema     // the input schema, when simple enough to judge on raw arguments
	check   func(context.Context, *CallRequest) (context.Context, error)
	handler CallHandler // the tool's handler inside its interceptors
	lane    *lane       // guarded by admission.mu
}

var toolNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// emptyObjectSchema is the input schema of a tool that takes no arguments.
var emptyObjectSchema = json.RawMessage(`{"type":"object"}`)

// AddTool registers a tool, replacing any tool of the same name, and tells
// subscribed clients that the list changed. Its calls run h inside the
// server's interceptors (Options.Interceptors) and then the ones given
// here. It returns an error, and registers nothing, when the definition
// is invalid or an interceptor refuses it.
func (s *Server) AddTool(t Tool, h ToolHandler, interceptors ...ToolInterceptor) error {
	if h == nil {
		return fmt.Errorf("server: tool %q has no handler", t.Name)
	}
	t.Meta = maps.Clone(t.Meta) // interceptors may add to it; the caller's map is not theirs
	t.srv, t.marks = s, nil     // marks are made by this registration's policies only
	handler, err := s.intercept(&t, adapt(h), interceptors)
	t.srv, t.marks = nil, nil
	if err != nil {
		return err
	}
	rt, err := compileTool(t)
	if err != nil {
		return err
	}
	if err := t.Policy.Group.bind(s); err != nil {
		return fmt.Errorf("server: tool %q: %w", t.Name, err)
	}
	rt.def.Meta = s.policyMeta(t.Meta, t.Policy)
	rt.handler = handler
	s.mu.Lock()
	s.tools[t.Name] = rt
	s.rebuildToolListLocked()
	s.mu.Unlock()
	s.listChanged(kindTools)
	return nil
}

// HasTool reports whether a tool of that name is registered: an observer
// labels by tool name only names the server chose, never free text a
// client sent.
func (s *Server) HasTool(name string) bool { return s.lookupTool(name) != nil }

// SetToolNotFound installs what a call of a tool the server does not
// serve is told: f's error for the name, or, when f returns nil (or none
// is installed), the standard invalid params "unknown tool". A server
// whose tools come from elsewhere (a gateway's, from an upstream that is
// down) can say why a tool is missing, and when to come back.
func (s *Server) SetToolNotFound(f func(name string) *jsonrpc.Error) {
	s.mu.Lock()
	s.toolNotFound = f
	s.mu.Unlock()
}

// RemoveTool unregisters a tool. Calls already running finish normally.
func (s *Server) RemoveTool(name string) bool {
	s.mu.Lock()
	_, ok := s.tools[name]
	if ok {
		delete(s.tools, name)
		s.rebuildToolListLocked()
	}
	s.mu.Unlock()
	if ok {
		s.listChanged(kindTools)
	}
	return ok
}

func compileTool(t Tool) (*registeredTool, error) {
	if !toolNamePattern.MatchString(t.Name) {
		return nil, fmt.Errorf("server: invalid tool name %q: use 1 to 128 characters from [A-Za-z0-9_.-]", t.Name)
	}
	if err := t.Policy.validate(t.Name); err != nil {
		return nil, err
	}
	in := t.InputSchema
	if len(bytes.TrimSpace(in)) == 0 {
		in = emptyObjectSchema
	}
	var schema jsonschema.Schema
	if err := json.Unmarshal(in, &schema); err != nil {
		var root struct {
			Type string `json:"type"`
		}
		if !t.Unchecked || json.Unmarshal(in, &root) != nil {
			return nil, fmt.Errorf("server: tool %q: input schema is not a JSON Schema: %w", t.Name, err)
		}
		schema = jsonschema.Schema{Type: root.Type} // served as given, never judged by
	}
	if schema.Type != "object" {
		return nil, fmt.Errorf("server: tool %q: input schema must have type \"object\" at its root", t.Name)
	}
	var resolved *jsonschema.Resolved
	if !t.Unchecked {
		var err error
		if resolved, err = schema.Resolve(nil); err != nil { // no loader: remote $refs are refused
			return nil, fmt.Errorf("server: tool %q: input schema: %w", t.Name, err)
		}
	}
	headers, err := findHeaderParams(in)
	if err != nil {
		return nil, fmt.Errorf("server: tool %q: %w", t.Name, err)
	}
	if len(t.OutputSchema) > 0 && !json.Valid(t.OutputSchema) {
		return nil, fmt.Errorf("server: tool %q: output schema is not valid JSON", t.Name)
	}
	// The output schema is only used to judge a failed result's
	// structuredContent (see result). One this validator cannot compile
	// (an older draft, a remote $ref) is still served as given: clients
	// may well understand it.
	var output *jsonschema.Resolved
	var os jsonschema.Schema
	if len(bytes.TrimSpace(t.OutputSchema)) > 0 && json.Unmarshal(t.OutputSchema, &os) == nil {
		output, _ = os.Resolve(nil)
	}
	return &registeredTool{
		def: mcp.Tool{
			Name:         t.Name,
			Title:        t.Title,
			Description:  t.Description,
			InputSchema:  bytes.Clone(in),
			OutputSchema: bytes.Clone(t.OutputSchema),
			Annotations:  t.Annotations,
			Execution:    t.Execution,
			Meta:         t.Meta,
		},
		policy:  t.Policy,
		schema:  resolved,
		output:  output,
		headers: headers,
		props:   declaredProps(&schema),
		flat:    flatSchemaOf(&schema),
		check:   t.Check,
		lane:    newLane(t.Policy.MaxConcurrent, t.Policy.MaxQueued, t.Policy.Rate, t.Policy.Burst),
	}, nil
}

// declares reports whether the tool's input schema declares argument name.
func (rt *registeredTool) declares(name string) bool { return rt.props[name] }

func declaredProps(s *jsonschema.Schema) map[string]bool {
	props := make(map[string]bool, len(s.Properties))
	for name := range s.Properties {
		props[name] = true
	}
	return props
}

// provenValid reports whether args need no validator: the tool takes
// anything (Tool.Unchecked), or its flat schema proves them valid.
func (rt *registeredTool) provenValid(args json.RawMessage) bool {
	return rt.schema == nil || rt.flat != nil && rt.flat.valid(args)
}

// validate checks a call's arguments, as decoded when it arrived and with
// any a Check supplied, against the tool's input schema. The error is an
// *mcp.ToolError with code invalid_arguments naming the offending field,
// so the model can correct its call.
func (rt *registeredTool) validate(call *CallRequest) error {
	if rt.schema == nil {
		return nil // Tool.Unchecked: the handler's judge judges them
	}
	if err := rt.schema.Validate(validationValue(call.args, call.supplied, rt.declares)); err != nil {
		field, msg := describeSchemaError(err)
		te := &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: "invalid arguments: " + msg}
		if field != "" {
			te.Details = map[string]any{"field": field}
		}
		return te
	}
	return nil
}

var (
	propertyPath   = regexp.MustCompile(`validating (/[^:]*): `)
	missingProps   = regexp.MustCompile(`missing properties: \["?([^"\]]+)`)
	unexpectedProp = regexp.MustCompile(`additional properties \["?([^"\]]+)`)
)

// describeSchemaError turns a validator error into a short message that
// names the argument at fault, such as `steps: has type "string", want
// "integer"`, and returns that argument's dotted path.
func describeSchemaError(err error) (field, msg string) {
	text := err.Error()
	matches := propertyPath.FindAllStringSubmatchIndex(text, -1)
	var path []string
	rest := text
	if len(matches) > 0 {
		last := matches[len(matches)-1]
		ptr := text[last[2]:last[3]]
		for _, seg := range strings.Split(strings.Trim(ptr, "/"), "/") {
			if seg != "" && seg != "properties" && seg != "items" && seg != "$defs" {
				path = append(path, seg)
			}
		}
		rest = strings.TrimPrefix(text[last[1]:], "type: ")
	} else if i := strings.LastIndex(text, ": "); i >= 0 && strings.HasPrefix(text, "validating root") {
		rest = text[len("validating root: "):]
	}
	if m := missingProps.FindStringSubmatch(rest); m != nil {
		path = append(path, m[1])
		rest = "required argument is missing"
	} else if m := unexpectedProp.FindStringSubmatch(rest); m != nil {
		path = append(path, m[1])
		rest = "unexpected argument"
	}
	field = strings.Join(path, ".")
	if field == "" {
		return "", rest
	}
	return field, field + ": " + rest
}

// AddTypedTool registers a tool whose handler takes decoded arguments of
// type In and returns a value of type Out.
//
// The input schema is inferred from In (a struct, whose json tags name the
// arguments; fields without omitempty are required) unless t.InputSchema is
// set. Arguments are validated against it before the handler runs. The
// result becomes structuredContent, with its JSON as a text block for
// clients that read only content; a string result becomes a plain text
// block. Errors follow the rules of ToolHandler.
func AddTypedTool[In, Out any](s *Server, t Tool, h func(ctx context.Context, req *CallRequest, in In) (Out, error), interceptors ...ToolInterceptor) error {
	if h == nil {
		return fmt.Errorf("server: tool %q has no handler", t.Name)
	}
	t, err := typedTool[In, Out](t)
	if err != nil {
		return err
	}
	return s.AddTool(t, typedHandler(h), interceptors...)
}

// typedTool completes t for a typed handler taking In and returning Out,
// as AddTypedTool does: it infers the input schema from In unless
// t.InputSchema is set, and the output schema from a struct Out unless
// t.OutputSchema is set.
func typedTool[In, Out any](t Tool) (Tool, error) {
	if t.InputSchema == nil {
		schema, err := inferSchema(reflect.TypeFor[In]())
		if err != nil {
			return t, fmt.Errorf("server: tool %q: inferring input schema: %w", t.Name, err)
		}
		if t.InputSchema, err = json.Marshal(schema); err != nil {
			return t, fmt.Errorf("server: tool %q: encoding input schema: %w", t.Name, err)
		}
	}
	outType := reflect.TypeFor[Out]()
	if t.OutputSchema == nil && outType.Kind() == reflect.Struct {
		if schema, err := inferSchema(outType); err == nil {
			t.OutputSchema, _ = json.Marshal(schema)
		}
	}
	return t, nil
}

// typedHandler adapts a typed handler to a ToolHandler.
func typedHandler[In, Out any](h func(ctx context.Context, req *CallRequest, in In) (Out, error)) ToolHandler {
	return func(ctx context.Context, req *CallRequest) (*mcp.CallToolResult, error) {
		in, err := typedArguments[In](req)
		if err != nil {
			return nil, err
		}
		out, err := h(ctx, req, in)
		if err != nil {
			return nil, err
		}
		return typedResult(out)
	}
}

// typedArguments decodes a call's arguments into In, as AddTypedTool does:
// the call's second and last decode of them, after the server's own.
func typedArguments[In any](req *CallRequest) (In, error) {
	var in In
	if len(req.Arguments) > 0 {
		if err := json.Unmarshal(req.Arguments, &in); err != nil {
			return in, &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: "invalid arguments: " + err.Error()}
		}
	}
	return in, nil
}

// typedResult turns a typed handler's result into a CallToolResult, as
// AddTypedTool does: structuredContent with its JSON as a text block, or
// a plain text block for a string.
func typedResult[Out any](out Out) (*mcp.CallToolResult, error) {
	if reflect.TypeFor[Out]().Kind() == reflect.String {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(reflect.ValueOf(out).String())}}, nil
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encoding the result: %w", err)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.Text(string(raw))},
		StructuredContent: json.RawMessage(raw),
	}, nil
}

// result maps what a tool handler returned onto the wire (toolResult), and
// is the one place that keeps a failed result from carrying
// structuredContent the tool's outputSchema does not describe: clients
// validate structuredContent against that schema even when isError is set,
// so such a result would reach the model as a client-side schema error
// instead of the failure. The failure itself stays in the text content
// (and, for a ToolError, in _meta[mcp.MetaFailure]).
func (rt *registeredTool) result(res mcp.Result, err error) (mcp.Result, *jsonrpc.Error) {
	out, rpcErr := toolResult(res, err)
	if c, ok := out.(*mcp.CallToolResult); ok && c.IsError && c.StructuredContent != nil && !rt.describes(c.StructuredContent) {
		cp := *c // the handler's value may be shared
		cp.StructuredContent = nil
		out = &cp
	}
	return out, rpcErr
}

// describes reports whether the tool's output schema accepts v as
// structuredContent: without a schema anything goes, and with one that
// could not be compiled nothing is known to.
func (rt *registeredTool) describes(v any) bool {
	if len(rt.def.OutputSchema) == 0 {
		return true
	}
	if rt.output == nil {
		return false
	}
	raw, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return false
		}
	}
	var inst any
	if err := json.Unmarshal(raw, &inst); err != nil {
		return false
	}
	return rt.output.Validate(inst) == nil
}

// inferSchema infers the JSON Schema of Go type t as the values
// encoding/json writes for it. Beyond jsonschema.ForType's defaults it
// describes raw JSON (json.RawMessage) and any other type that encodes
// itself (a json.Marshaler) as "any JSON value", a type that encodes as
// text (an encoding.TextMarshaler) as a string, and []byte, which
// encoding/json writes as base64 text, as a string: inferred from their Go
// shape they would be arrays of bytes, which no result ever is.
func inferSchema(t reflect.Type) (*jsonschema.Schema, error) {
	schemas := map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[[]byte](): {Types: []string{"null", "string"}, ContentEncoding: "base64"},
	}
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		if seen[t] {
			return
		}
		seen[t] = true
		if _, known := schemas[t]; known {
			return
		}
		switch {
		case t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler):
			if !knownMarshaler(t) {
				schemas[t] = anyJSON()
			}
			return
		case t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler):
			if !knownMarshaler(t) {
				schemas[t] = &jsonschema.Schema{Type: "string"}
			}
			return
		}
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(t.Elem())
		case reflect.Map:
			walk(t.Elem())
		case reflect.Struct:
			for _, f := range reflect.VisibleFields(t) {
				if f.IsExported() {
					walk(f.Type)
				}
			}
		}
	}
	walk(t)
	return jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: schemas})
}

// anyJSON is the schema of any JSON value. It lists the types rather than
// being the empty schema because jsonschema.ForType narrows an empty
// schema reached through a pointer to "null".
func anyJSON() *jsonschema.Schema {
	return &jsonschema.Schema{Types: []string{"null", "boolean", "number", "string", "array", "object"}}
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// knownMarshaler reports whether jsonschema.ForType already describes what
// a self-encoding standard type writes (time.Time, slog.Level and the
// math/big numbers: strings).
func knownMarshaler(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case reflect.TypeFor[time.Time](), reflect.TypeFor[slog.Level](),
		reflect.TypeFor[big.Int](), reflect.TypeFor[big.Rat](), reflect.TypeFor[big.Float]():
		return true
	}
	return false
}

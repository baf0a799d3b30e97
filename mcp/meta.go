package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/mcprel/mcprel/jsonrpc"
)

// RequestMeta is what a request's params._meta says that the protocol
// itself cares about. Keys it does not know (such as mcprel's own) stay in
// the raw _meta, which the server keeps beside it.
type RequestMeta struct {
	// ProtocolVersion is set on every modern request and absent on legacy
	// ones; its presence is what makes a request modern.
	ProtocolVersion *string `json:"io.modelcontextprotocol/protocolVersion"`
	// ClientCapabilities is required on modern requests.
	ClientCapabilities *ClientCapabilities `json:"io.modelcontextprotocol/clientCapabilities"`
	ClientInfo         *Implementation     `json:"io.modelcontextprotocol/clientInfo,omitempty"`
	// LogLevel opts a modern request into notifications/message.
	LogLevel *LoggingLevel `json:"io.modelcontextprotocol/logLevel,omitempty"`
	// ProgressToken opts the request into notifications/progress.
	ProgressToken *jsonrpc.ID `json:"progressToken,omitempty"`
	// IdempotencyKey is MetaIdempotencyKey's value, undecoded (the server
	// checks it only for tools that take a key).
	IdempotencyKey json.RawMessage `json:"dev.mcprel/idempotencyKey,omitempty"`
	// TraceParent and TraceState carry a W3C trace context, where the
	// OpenTelemetry conventions for MCP put it: a server's span for the
	// request continues the client's trace.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// ErrMissingMeta and the errors below describe a malformed modern _meta;
// the server answers them with -32602 (HTTP 400).
var (
	ErrMissingMeta               = errors.New("params._meta is required in protocol version " + Version20260728 + " (or send initialize first to use a 2025 revision)")
	ErrMissingProtocolVersion    = errors.New(`params._meta["` + MetaProtocolVersion + `"] is required`)
	ErrMissingClientCapabilities = errors.New(`params._meta["` + MetaClientCapabilities + `"] is required`)
)

// ParseRequestMeta extracts the _meta of a request's params. It returns the
// parsed fields, the raw _meta object (nil when absent) and an error when
// _meta is present but malformed. Whether the fields required in the modern
// era are present is checked by RequestMeta.CheckModern.
func ParseRequestMeta(params json.RawMessage) (RequestMeta, json.RawMessage, error) {
	raw, err := rawMeta(params)
	if err != nil || raw == nil {
		return RequestMeta{}, nil, err
	}
	m, err := parseMeta(raw)
	return m, raw, err
}

// rawMeta returns the _meta object of params, nil when absent or null.
func rawMeta(params json.RawMessage) (json.RawMessage, error) {
	if len(params) == 0 {
		return nil, nil
	}
	// Only _meta is found: the other members are left to the method's
	// own decoding, so no byte of them is read twice.
	var meta []byte
	if err := jsonrpc.Members(params, func(k, v []byte) bool {
		if string(k) == "_meta" {
			meta = v
		}
		return true
	}); err != nil {
		if !jsonrpc.Valid(params) {
			return nil, errors.New("invalid params: not valid JSON")
		}
		return nil, errors.New("invalid params: params must be an object")
	}
	raw := bytes.TrimSpace(meta)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, errors.New("params._meta must be an object")
	}
	return raw, nil
}

func parseMeta(raw json.RawMessage) (RequestMeta, error) {
	var m RequestMeta
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, fmt.Errorf("invalid params._meta: %w", err)
	}
	return m, nil
}

// MetaCache parses requests' _meta as ParseRequestMeta does, and
// remembers the last _meta it parsed: a 2026-07-28 client sends the same
// one — its version and capabilities — on every request, so a connection
// decodes it once rather than per request. A parse is shared only within
// a scope (a tenant): the RequestMeta it returns shares its pointers with
// the scope's other requests that sent the same bytes, so they must be
// read, never written through, and one tenant's requests never reach
// another's. Its zero value is ready; it is safe for concurrent use.
type MetaCache struct {
	mu    sync.Mutex
	scope string
	raw   []byte // the last _meta parsed, at most maxCachedMeta bytes
	meta  RequestMeta
}

// maxCachedMeta bounds the _meta a MetaCache keeps.
const maxCachedMeta = 4 << 10

// Parse is ParseRequestMeta, answered from the cache when params' _meta
// is byte for byte the last one parsed in the same scope. The raw _meta
// returned is always params' own.
func (c *MetaCache) Parse(scope string, params json.RawMessage) (RequestMeta, json.RawMessage, error) {
	raw, err := rawMeta(params)
	if err != nil || raw == nil {
		return RequestMeta{}, nil, err
	}
	c.mu.Lock()
	if c.raw != nil && c.scope == scope && bytes.Equal(raw, c.raw) {
		m := c.meta
		c.mu.Unlock()
		return m, raw, nil
	}
	c.mu.Unlock()
	m, err := parseMeta(raw)
	if err == nil && len(raw) <= maxCachedMeta {
		c.mu.Lock()
		c.scope, c.raw, c.meta = scope, append(c.raw[:0], raw...), m
		c.mu.Unlock()
	}
	return m, raw, err
}

// IsModern reports whether the request declares a protocol version in
// _meta, which is what selects modern, stateless handling.
func (m *RequestMeta) IsModern() bool { return m.ProtocolVersion != nil }

// CheckModern verifies the fields a modern request must carry. present says
// whether _meta existed at all.
func (m *RequestMeta) CheckModern(present bool) error {
	switch {
	case !present:
		return ErrMissingMeta
	case m.ProtocolVersion == nil:
		return ErrMissingProtocolVersion
	case m.ClientCapabilities == nil:
		return ErrMissingClientCapabilities
	}
	return nil
}

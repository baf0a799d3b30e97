package mcp

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/mcprel/mcprel/jsonrpc"
)

// Meta is a _meta object: keys are namespaced names, values any JSON.
type Meta map[string]any

// ResultBase holds the members every result may carry. Every result type in
// this package embeds it.
type ResultBase struct {
	// Meta carries result metadata; in the modern era the server puts its
	// identity under MetaServerInfo here.
	Meta Meta `json:"_meta,omitempty"`
	// ResultType is required in the modern era ("complete" for an ordinary
	// result) and absent in the legacy era.
	ResultType string `json:"resultType,omitempty"`
}

// Base returns the common members, so that code handling any result can set
// them.
func (r *ResultBase) Base() *ResultBase { return r }

// Result is implemented by every result type (through ResultBase).
type Result interface {
	Base() *ResultBase
}

// EmptyResult is the result of ping, logging/setLevel and similar calls.
type EmptyResult struct {
	ResultBase
}

// Cacheable holds the modern era's caching hints, required on list, read and
// discover results. Both are omitted in the legacy era.
type Cacheable struct {
	TTLMs      *int64 `json:"ttlMs,omitempty"`
	CacheScope string `json:"cacheScope,omitempty"`
}

// Implementation names a client or server.
type Implementation struct {
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Version     string `json:"version"`
	Description string `json:"description,omitempty"`
	WebsiteURL  string `json:"websiteUrl,omitempty"`
}

// ListChangedCapability advertises list-changed notifications.
type ListChangedCapability struct {
	ListChanged bool `json:"listChanged,omitempty"`
}

// ResourcesCapability advertises resources.
type ResourcesCapability struct {
	Subscribe   bool `json:"subscribe,omitempty"`
	ListChanged bool `json:"listChanged,omitempty"`
}

// ServerCapabilities is what a server advertises (initialize or discover).
// A nil member is an absent capability; a non-nil one is present even when
// it has no fields set.
type ServerCapabilities struct {
	Experimental map[string]map[string]any `json:"experimental,omitempty"`
	Logging      *struct{}                 `json:"logging,omitempty"`
	Completions  *struct{}                 `json:"completions,omitempty"`
	Prompts      *ListChangedCapability    `json:"prompts,omitempty"`
	Resources    *ResourcesCapability      `json:"resources,omitempty"`
	Tools        *ListChangedCapability    `json:"tools,omitempty"`
	Extensions   map[string]map[string]any `json:"extensions,omitempty"`
	// Other holds capability members this package has no field for, by
	// name, such as the 2025-11-25 "tasks": written beside the others,
	// and filled with whatever else a decoded object had.
	Other map[string]json.RawMessage `json:"-"`
}

// knownServerCapabilities are the members ServerCapabilities has fields for.
var knownServerCapabilities = []string{"experimental", "logging", "completions", "prompts", "resources", "tools", "extensions"}

// serverCapabilities is ServerCapabilities without its methods.
type serverCapabilities ServerCapabilities

// MarshalJSON writes the known members and then Other's.
func (c ServerCapabilities) MarshalJSON() ([]byte, error) {
	known, err := json.Marshal(serverCapabilities(c))
	if err != nil || len(c.Other) == 0 {
		return known, err
	}
	names := make([]string, 0, len(c.Other))
	for name := range c.Other {
		names = append(names, name)
	}
	slices.Sort(names)
	out := known[:len(known)-1] // without its closing brace
	for _, name := range names {
		if slices.Contains(knownServerCapabilities, name) {
			continue // a known member wins
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = strconv.AppendQuote(out, name)
		out = append(out, ':')
		out = append(out, c.Other[name]...)
	}
	return append(out, '}'), nil
}

// UnmarshalJSON reads the known members and keeps the rest in Other.
func (c *ServerCapabilities) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, (*serverCapabilities)(c)); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	for _, known := range knownServerCapabilities {
		delete(all, known)
	}
	if len(all) > 0 {
		c.Other = all
	}
	return nil
}

// ClientCapabilities is what a client declares, at initialize (legacy) or
// in every request's _meta (modern). Sub-objects are kept raw: what matters
// to a server is whether each is present.
type ClientCapabilities struct {
	Experimental map[string]json.RawMessage `json:"experimental,omitempty"`
	Roots        json.RawMessage            `json:"roots,omitempty"`
	Sampling     json.RawMessage            `json:"sampling,omitempty"`
	Elicitation  json.RawMessage            `json:"elicitation,omitempty"`
	Tasks        json.RawMessage            `json:"tasks,omitempty"`
	Extensions   map[string]json.RawMessage `json:"extensions,omitempty"`
}

// InitializeParams are the params of a legacy initialize request.
type InitializeParams struct {
	ProtocolVersion string             `json:"protocolVersion"`
	Capabilities    ClientCapabilities `json:"capabilities"`
	ClientInfo      Implementation     `json:"clientInfo"`
}

// InitializeResult answers initialize.
type InitializeResult struct {
	ResultBase
	ProtocolVersion string             `json:"protocolVersion"`
	Capabilities    ServerCapabilities `json:"capabilities"`
	ServerInfo      Implementation     `json:"serverInfo"`
	Instructions    string             `json:"instructions,omitempty"`
}

// DiscoverResult answers server/discover (modern).
type DiscoverResult struct {
	ResultBase
	Cacheable
	SupportedVersions []string           `json:"supportedVersions"`
	Capabilities      ServerCapabilities `json:"capabilities"`
	Instructions      string             `json:"instructions,omitempty"`
}

// ToolAnnotations are hints about a tool's behaviour. They are claims by the
// server, never proof: a client must not treat idempotentHint as a licence
// to retry. Absent hints take the specification's defaults (readOnly false,
// destructive true, idempotent false, openWorld true), hence the pointers.
type ToolAnnotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// Tool describes a callable tool, as tools/list returns it.
type Tool struct {
	Name         string           `json:"name"`
	Title        string           `json:"title,omitempty"`
	Description  string           `json:"description,omitempty"`
	InputSchema  json.RawMessage  `json:"inputSchema"`
	OutputSchema json.RawMessage  `json:"outputSchema,omitempty"`
	Annotations  *ToolAnnotations `json:"annotations,omitempty"`
	// Execution is the 2025-11-25 era's execution member (task support);
	// the 2026-07-28 era has none.
	Execution *ToolExecution `json:"execution,omitempty"`
	Meta      Meta           `json:"_meta,omitempty"`
}

// ListParams are the params of every paginated list request.
type ListParams struct {
	Cursor *string `json:"cursor,omitempty"`
}

// ListToolsResult answers tools/list.
type ListToolsResult struct {
	ResultBase
	Cacheable
	Tools      []Tool `json:"tools"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// CallToolParams are the params of tools/call. Arguments stay raw so that
// they are decoded once, against the tool's own types.
type CallToolParams struct {
	Name      *string         `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// CallToolResult is the outcome of a tool call. A tool failure is a result
// with IsError set, not a protocol error, so that the model sees it.
type CallToolResult struct {
	ResultBase
	Content           []Content `json:"content"`
	StructuredContent any       `json:"structuredContent,omitempty"`
	IsError           bool      `json:"isError,omitempty"`
}

// ProgressParams are the params of notifications/progress.
type ProgressParams struct {
	ProgressToken jsonrpc.ID `json:"progressToken"`
	Progress      float64    `json:"progress"`
	Total         *float64   `json:"total,omitempty"`
	Message       string     `json:"message,omitempty"`
}

// CancelledParams are the params of notifications/cancelled.
type CancelledParams struct {
	RequestID jsonrpc.ID `json:"requestId"`
	Reason    string     `json:"reason,omitempty"`
}

// SetLevelParams are the params of logging/setLevel (legacy).
type SetLevelParams struct {
	Level LoggingLevel `json:"level"`
}

// LoggingMessageParams are the params of notifications/message.
type LoggingMessageParams struct {
	Level  LoggingLevel `json:"level"`
	Logger string       `json:"logger,omitempty"`
	Data   any          `json:"data"`
}

// SubscriptionFilter selects the notifications a subscriptions/listen stream
// carries; the acknowledgement echoes the subset the server honours.
type SubscriptionFilter struct {
	ToolsListChanged      bool     `json:"toolsListChanged,omitempty"`
	PromptsListChanged    bool     `json:"promptsListChanged,omitempty"`
	ResourcesListChanged  bool     `json:"resourcesListChanged,omitempty"`
	ResourceSubscriptions []string `json:"resourceSubscriptions,omitempty"`
}

// ListenParams are the params of subscriptions/listen.
type ListenParams struct {
	Notifications *SubscriptionFilter `json:"notifications"`
}

// SubscriptionAckParams are the params of
// notifications/subscriptions/acknowledged.
type SubscriptionAckParams struct {
	Meta          Meta               `json:"_meta"`
	Notifications SubscriptionFilter `json:"notifications"`
}

// SubscriptionMeta is the _meta of every message on a subscription stream.
func SubscriptionMeta(id jsonrpc.ID) Meta {
	return Meta{MetaSubscriptionID: id}
}

// Bool returns a pointer to b, for the optional hints in ToolAnnotations.
func Bool(b bool) *bool { return &b }

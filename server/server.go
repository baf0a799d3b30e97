package server

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/outbound"
)

// Defaults for Options fields left at zero.
const (
	DefaultMaxConcurrentCalls = 64
	DefaultMaxQueuedCalls     = 256
	DefaultOverloadRetryAfter = time.Second
	DefaultMaxSubscriptions   = 32
	// DefaultMaxSubscriptionsTotal bounds the listen streams open on the
	// whole server.
	DefaultMaxSubscriptionsTotal = 1024
	// DefaultListTTL is the ttlMs a modern tools/list and discover result
	// carries: how long a client may cache the answer.
	DefaultListTTL = time.Minute
	// DefaultProgressInterval allows at most 20 progress notifications a
	// second per request.
	DefaultProgressInterval = 50 * time.Millisecond
	// DefaultMaxInflightBytes bounds the bytes held by the requests of
	// running and queued calls: sixteen messages of the default 4 MiB cap.
	DefaultMaxInflightBytes = 16 * jsonrpc.DefaultMaxMessageBytes
)

// Options configure a Server. The zero value is valid and conservative; each
// field says what zero means. Negative values are errors, never "unlimited".
type Options struct {
	// Instructions are natural-language guidance for the model, sent in
	// the initialize and server/discover results.
	Instructions string

	// MaxConcurrentCalls bounds how many tool handlers run at once across
	// the whole server. Zero means DefaultMaxConcurrentCalls.
	MaxConcurrentCalls int
	// MaxQueuedCalls bounds how many admitted calls may wait for a free
	// slot. Past it, calls are refused at once with a retryable overload
	// error (mcp.CodeOverloaded). Zero means DefaultMaxQueuedCalls.
	MaxQueuedCalls int
	// MaxInflightBytes bounds, in total, the bytes of the requests (their
	// params) of calls running and queued: a count of calls alone would
	// let a few hundred large ones take gigabytes. A call that would pass
	// it is refused with the same retryable overload error. It must be at
	// least the transports' message cap, or the largest messages could
	// never run. Zero means DefaultMaxInflightBytes.
	MaxInflightBytes int64
	// OverloadRetryAfter is the retryAfterMs an overload error suggests
	// until the server has seen how long calls take (after that it
	// estimates from their average run time). Zero means
	// DefaultOverloadRetryAfter.
	OverloadRetryAfter time.Duration
	// Tenant bounds what each tenant (see WithTenant) may use: concurrent
	// calls, queued calls and a token-bucket rate. The zero value sets no
	// per-tenant limit.
	Tenant Limits

	// Fast and Standard are the default deadlines of tools in those timeout
	// classes (see Policy.Timeout); Standard also bounds resource reads,
	// prompts and completions. Zero fields mean DefaultFast and
	// DefaultStandard.
	Fast, Standard Deadlines
	// ProgressInterval is the shortest time between two progress
	// notifications for one request; reports in between are coalesced and
	// the newest is sent when the interval has passed. Zero means
	// DefaultProgressInterval.
	ProgressInterval time.Duration

	// QueueCapacity is the number of messages each outbound stream may
	// hold (see outbound.Queue). Zero means outbound.DefaultCapacity.
	QueueCapacity int
	// MaxSubscriptions bounds the subscriptions/listen streams one tenant
	// (see WithTenant) may hold open at once, across every connection:
	// over Streamable HTTP all 2026-07-28 requests share one session, so a
	// bound per session would be one pool for every client. Past it a
	// listen is refused with -32600. Zero means DefaultMaxSubscriptions.
	MaxSubscriptions int
	// MaxSubscriptionsTotal bounds the listen streams open on the whole
	// server; past it a listen is refused with the retryable overload
	// error. Zero means DefaultMaxSubscriptionsTotal.
	MaxSubscriptionsTotal int
	// ListTTL is the ttlMs of modern list and discover results. Zero means
	// DefaultListTTL.
	ListTTL time.Duration

	// Logger receives one line per request with its terminal state (id,
	// method, tool, outcome, duration), at info; a call's argument
	// summary (RequestRecord.ArgumentSummary) is on the line only when
	// Logger is enabled at debug, since arguments are the caller's data.
	// Nil means slog.Default(), which writes to stderr; never stdout,
	// which belongs to the protocol.
	Logger *slog.Logger

	// StateKey signs the requestState of input_required results, so that a
	// client cannot forge or alter it. Replicas that serve each other's
	// retries need the same key. Nil means a random key per process.
	StateKey []byte
	// StateTTL is how long a signed requestState stays valid. Zero means
	// DefaultStateTTL.
	StateTTL time.Duration

	// Interceptors adapt every tool registered on the server (see
	// ToolInterceptor), outside the ones given to AddTool; the first is
	// the outermost.
	Interceptors []ToolInterceptor

	// Observers are told when every request starts and ends (see
	// Observer): metrics, traces, logs. They run in order.
	Observers []Observer
}

func (o *Options) validate() error {
	if err := o.Tenant.validate("Options.Tenant"); err != nil {
		return err
	}
	for name, v := range map[string]int64{
		"MaxConcurrentCalls":    int64(o.MaxConcurrentCalls),
		"MaxQueuedCalls":        int64(o.MaxQueuedCalls),
		"OverloadRetryAfter":    int64(o.OverloadRetryAfter),
		"MaxInflightBytes":      o.MaxInflightBytes,
		"QueueCapacity":         int64(o.QueueCapacity),
		"MaxSubscriptions":      int64(o.MaxSubscriptions),
		"MaxSubscriptionsTotal": int64(o.MaxSubscriptionsTotal),
		"ListTTL":               int64(o.ListTTL),
		"StateTTL":              int64(o.StateTTL),
		"ProgressInterval":      int64(o.ProgressInterval),
	} {
		if v < 0 {
			return fmt.Errorf("server: Options.%s must not be negative", name)
		}
	}
	return nil
}

// Server is an MCP server: a registry of tools and the request lifecycle
// that runs them. Transports (transport/stdio, transport/streamhttp) feed it
// messages through Sessions.
type Server struct {
	info       mcp.Implementation
	opts       Options
	log        *slog.Logger
	admit      *admission
	state      *stateSigner
	serverInfo json.RawMessage // info, encoded once for result _meta
	modernHead []byte          // what every plain modern result begins with: "{" resultType and _meta.serverInfo

	// Lanes shared by all resources, all prompts and completion; tools
	// have one each.
	resourceLane, promptLane, completeLane *lane

	mu         sync.RWMutex
	tools      map[string]*registeredTool
	toolList   []mcp.Tool // sorted by name; rebuilt on change
	modernList []mcp.Tool // toolList as the 2026-07-28 era shows it: no execution member
	resources  map[string]*registeredResource
	templates  []*registeredTemplate // sorted by URI template
	prompts    map[string]*registeredPrompt
	completion CompletionHandler
	// toolNotFound answers a call of a tool not served (SetToolNotFound).
	toolNotFound func(name string) *jsonrpc.Error
	sessions     map[*session]struct{}
	routes       map[string]*registeredRoute // methods added from outside (AddRoute)

	declaredLegacy, declaredModern declared // capabilities added from outside (Declare)

	listens  listenCount
	draining bool // Shutdown has begun; guarded by mu
	down     shutdown

	// testHooks let internal tests run code at a point a race could.
	testHooks struct {
		listenTracked func() // a listen is registered, its acknowledgement not yet sent
	}
}

// listenCount counts the open listen streams, per tenant and in all.
type listenCount struct {
	mu       sync.Mutex
	total    int
	byTenant map[string]int
}

// New returns a server that identifies itself as info. opts may be nil.
func New(info mcp.Implementation, opts *Options) (*Server, error) {
	if info.Name == "" || info.Version == "" {
		return nil, errors.New("server: Implementation needs a Name and a Version")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if t := o.Tenant; t.MaxConcurrent < 0 || t.MaxQueued < 0 || t.Rate < 0 || t.Burst < 0 || t.MaxBytes < 0 {
		return nil, errors.New("server: Options.Tenant limits must not be negative")
	}
	if err := o.Fast.validate("Options.Fast"); err != nil {
		return nil, err
	}
	if err := o.Standard.validate("Options.Standard"); err != nil {
		return nil, err
	}
	o.Fast = o.Fast.or(DefaultFast)
	o.Standard = o.Standard.or(DefaultStandard)
	o.ProgressInterval = cmp.Or(o.ProgressInterval, DefaultProgressInterval)
	o.MaxConcurrentCalls = cmp.Or(o.MaxConcurrentCalls, DefaultMaxConcurrentCalls)
	o.MaxQueuedCalls = cmp.Or(o.MaxQueuedCalls, DefaultMaxQueuedCalls)
	o.MaxInflightBytes = cmp.Or(o.MaxInflightBytes, DefaultMaxInflightBytes)
	o.OverloadRetryAfter = cmp.Or(o.OverloadRetryAfter, DefaultOverloadRetryAfter)
	o.QueueCapacity = cmp.Or(o.QueueCapacity, outbound.DefaultCapacity)
	o.MaxSubscriptions = cmp.Or(o.MaxSubscriptions, DefaultMaxSubscriptions)
	o.MaxSubscriptionsTotal = cmp.Or(o.MaxSubscriptionsTotal, DefaultMaxSubscriptionsTotal)
	o.ListTTL = cmp.Or(o.ListTTL, DefaultListTTL)
	o.StateTTL = cmp.Or(o.StateTTL, DefaultStateTTL)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	si, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("server: encoding Implementation: %w", err)
	}
	return &Server{
		info:         info,
		opts:         o,
		log:          o.Logger,
		admit:        newAdmission(o.MaxConcurrentCalls, o.MaxQueuedCalls, o.MaxInflightBytes, o.Tenant, o.OverloadRetryAfter),
		state:        newStateSigner(o.StateKey, o.StateTTL),
		serverInfo:   si,
		modernHead:   []byte(`{"_meta":{"` + mcp.MetaServerInfo + `":` + string(si) + `},"resultType":"` + mcp.ResultComplete + `"`),
		tools:        make(map[string]*registeredTool),
		resources:    make(map[string]*registeredResource),
		prompts:      make(map[string]*registeredPrompt),
		sessions:     make(map[*session]struct{}),
		down:         shutdown{stopped: make(chan struct{})},
		resourceLane: newLane(0, 0, 0, 0),
		promptLane:   newLane(0, 0, 0, 0),
		completeLane: newLane(0, 0, 0, 0),
	}, nil
}

// Info returns the identity the server reports.
func (s *Server) Info() mcp.Implementation { return s.info }

// capabilities is what the server advertises in an era: tools always,
// resources, prompts and completions when something offers them, and
// what packages above the server declared for that era.
func (s *Server) capabilities(era mcp.Era) mcp.ServerCapabilities {
	c := mcp.ServerCapabilities{
		Tools:   &mcp.ListChangedCapability{ListChanged: true},
		Logging: &struct{}{},
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.declaredLegacy
	if era == mcp.Modern {
		d = s.declaredModern
	}
	c.Other = d.caps // never written after it is built: Declare makes new maps
	c.Extensions = d.extensions
	if len(s.resources) > 0 || len(s.templates) > 0 {
		c.Resources = &mcp.ResourcesCapability{Subscribe: true, ListChanged: true}
	}
	if len(s.prompts) > 0 {
		c.Prompts = &mcp.ListChangedCapability{ListChanged: true}
	}
	if s.completion != nil {
		c.Completions = &struct{}{}
	}
	return c
}

// cacheable returns the modern era's caching hints for list, read and
// discover results.
func (s *Server) cacheable() mcp.Cacheable {
	ttl := s.opts.ListTTL.Milliseconds()
	return mcp.Cacheable{TTLMs: &ttl, CacheScope: "public"}
}

// listTools returns the tools in deterministic (name) order.
func (s *Server) listTools(era mcp.Era) []mcp.Tool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if era == mcp.Modern {
		return s.modernList
	}
	return s.toolList
}

func (s *Server) lookupTool(name string) *registeredTool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tools[name]
}

// lookupToolBytes is lookupTool for a name still in a frame's bytes,
// which a map index reads without making a string of them.
func (s *Server) lookupToolBytes(name []byte) *registeredTool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tools[string(name)]
}

// rebuildToolListLocked refreshes the cached, sorted tool list.
func (s *Server) rebuildToolListLocked() {
	list := make([]mcp.Tool, 0, len(s.tools))
	for _, t := range s.tools {
		list = append(list, t.def)
	}
	slices.SortFunc(list, func(a, b mcp.Tool) int { return cmp.Compare(a.Name, b.Name) })
	s.toolList = list
	s.modernList = list
	cloned := false
	for i := range list {
		if list[i].Execution != nil {
			if !cloned {
				s.modernList, cloned = slices.Clone(list), true
			}
			s.modernList[i].Execution = nil
		}
	}
}

// sessionsSnapshot returns the live sessions.
func (s *Server) sessionsSnapshot() []*session {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		out = append(out, ss)
	}
	return out
}

// listKind names the lists whose changes clients may hear about.
type listKind uint8

const (
	kindTools listKind = iota
	kindResources
	kindPrompts
)

// listChanged tells every session that a list changed.
func (s *Server) listChanged(k listKind) {
	for _, ss := range s.sessionsSnapshot() {
		ss.notifyListChanged(k)
	}
}

// Logger returns the logger the server writes its request log to.
func (s *Server) Logger() *slog.Logger { return s.log }

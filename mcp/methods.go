package mcp

// Method names. Which era a method belongs to is noted where it is not both.
const (
	MethodInitialize     = "initialize"       // legacy
	MethodPing           = "ping"             // legacy
	MethodSetLevel       = "logging/setLevel" // legacy
	MethodDiscover       = "server/discover"  // modern
	MethodListen         = "subscriptions/listen"
	MethodToolsList      = "tools/list"
	MethodToolsCall      = "tools/call"
	MethodResourcesList  = "resources/list"
	MethodResourcesRead  = "resources/read"
	MethodResourceTempls = "resources/templates/list"
	MethodSubscribe      = "resources/subscribe"   // legacy
	MethodUnsubscribe    = "resources/unsubscribe" // legacy
	MethodPromptsList    = "prompts/list"
	MethodPromptsGet     = "prompts/get"
	MethodComplete       = "completion/complete"

	NotificationInitialized      = "notifications/initialized" // legacy
	NotificationCancelled        = "notifications/cancelled"
	NotificationProgress         = "notifications/progress"
	NotificationMessage          = "notifications/message"
	NotificationToolsListChanged = "notifications/tools/list_changed"
	NotificationPromptsChanged   = "notifications/prompts/list_changed"
	NotificationResourcesChanged = "notifications/resources/list_changed"
	NotificationResourceUpdated  = "notifications/resources/updated"
	NotificationSubscriptionAck  = "notifications/subscriptions/acknowledged" // modern
)

// Reserved _meta keys the specification defines.
const (
	MetaProgressToken      = "progressToken"
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaLogLevel           = "io.modelcontextprotocol/logLevel"
	MetaSubscriptionID     = "io.modelcontextprotocol/subscriptionId"
	MetaServerInfo         = "io.modelcontextprotocol/serverInfo"
)

// MetaPrefix is the _meta prefix for keys mcprel defines itself.
const MetaPrefix = "dev.mcprel/"

// Idempotency keys and result marks (docs/errors.md, "Idempotency").
const (
	// ArgIdempotencyKey is the tool argument that carries an idempotency
	// key: the key the client chose for one logical operation, reused on
	// every retry of it.
	ArgIdempotencyKey = "idempotencyKey"
	// MetaIdempotencyKey carries the key in a request's params._meta, for
	// tools whose arguments cannot hold it.
	MetaIdempotencyKey = MetaPrefix + "idempotencyKey"
	// MetaReplayed, in a result's _meta, is true when the result was
	// committed by an earlier call with the same key and nothing ran now,
	// false when this call executed the operation.
	MetaReplayed = MetaPrefix + "replayed"
	// MetaExecutedAt, beside MetaReplayed, is when the operation committed
	// (RFC 3339).
	MetaExecutedAt = MetaPrefix + "executedAt"
	// MetaRetrySafe is false on the result of a mutating call made without
	// an idempotency key: it ran, and a retry would run it again.
	MetaRetrySafe = MetaPrefix + "retrySafe"
)

// What a tool's _meta in tools/list says of its reliability policy, so that
// a client (or mcprel review) can plan retries and deadlines. A client acts
// on them only when it trusts the server: they are the server's word.
const (
	// MetaRetryClass is "safe", "conditional" or "unsafe" (see
	// server.RetryClass).
	MetaRetryClass = MetaPrefix + "retryClass"
	// MetaTimeoutClass is "fast", "standard" or "long" (see
	// server.TimeoutClass); MetaIdleTimeoutMs and MetaMaxTimeoutMs are the
	// deadlines the server applies to a call.
	MetaTimeoutClass  = MetaPrefix + "timeoutClass"
	MetaIdleTimeoutMs = MetaPrefix + "idleTimeoutMs"
	MetaMaxTimeoutMs  = MetaPrefix + "maxTimeoutMs"
	// MetaKeyMode is "required", "optional" or
	// "none": whether calls carry an idempotency key.
	MetaKeyMode = MetaPrefix + "idempotencyKeyMode"
	// MetaTaskSupport is "optional" or "required" for a tool that can run
	// as a durable task (absent otherwise), in both eras: the 2026-07-28
	// era has no execution.taskSupport on the wire.
	MetaTaskSupport = MetaPrefix + "taskSupport"
)

// MetaFailure, in the _meta of a result whose isError is true, is the
// structured failure body (Failure: code, message, retryable, …), the same
// body the result's text content holds as JSON. It is where programs read
// a tool failure; structuredContent is left to the tool's outputSchema.
const MetaFailure = MetaPrefix + "failure"

// ResultType values for the modern era's resultType member.
const (
	ResultComplete      = "complete"
	ResultInputRequired = "input_required"
)

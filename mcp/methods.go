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
	// MetaDelivery, in a result's _meta, is what became of the intents
	// the call handed to the transactional outbox: a list, one per
	// receiver, each its operation id, target, state (pending, delivered
	// or failed), attempts, next attempt and the receiver's answer.
	MetaDelivery = MetaPrefix + "delivery"
	// MetaRetrySafe is false on the result of a mutating call made without
	// an idempotency key: it ran, and a retry would run it again.
	MetaRetrySafe = MetaPrefix + "retrySafe"
)

// What a tool's _meta in tools/list says of its reliability policy, so that
// a client (or mcprel review) can plan retries and deadlines. A client acts
// on them only when it trusts the server: they are the server's word.
const (
	// MetaRetryClass is RetryClassSafe, RetryClassConditional or
	// RetryClassUnsafe (see RetryClass).
	MetaRetryClass = MetaPrefix + "retryClass"
	// MetaTimeoutClass is "fast", "standard" or "long" (see
	// server.TimeoutClass); MetaIdleTimeoutMs and MetaMaxTimeoutMs are the
	// deadlines the server applies to a call.
	MetaTimeoutClass  = MetaPrefix + "timeoutClass"
	MetaIdleTimeoutMs = MetaPrefix + "idleTimeoutMs"
	MetaMaxTimeoutMs  = MetaPrefix + "maxTimeoutMs"
	// MetaKeyMode is one of the KeyMode… values: whether calls carry an
	// idempotency key, or a version that refuses to apply twice.
	MetaKeyMode = MetaPrefix + "idempotencyKeyMode"
	// MetaTaskSupport is "optional" or "required" for a tool that can run
	// as a durable task (absent otherwise), in both eras: the 2026-07-28
	// era has no execution.taskSupport on the wire.
	MetaTaskSupport = MetaPrefix + "taskSupport"

	// What a keyed tool's _meta says of its idempotency ledger (package
	// idempotency sets them), so that a reviewer need not guess:
	// MetaLedgerStore is "sqlite" or "postgres"; MetaLedgerShared is true
	// when replicas share the ledger (PostgreSQL); MetaLedgerTransaction
	// lists what commits in the ledger's one transaction (the Ledger…
	// steps); MetaEffect says where the effect lies (the Effect… values);
	// MetaReturnedRecords is ReturnedRecordsDefensiveCopy.
	MetaLedgerStore       = MetaPrefix + "ledgerStore"
	MetaLedgerShared      = MetaPrefix + "ledgerShared"
	MetaLedgerTransaction = MetaPrefix + "ledgerTransaction"
	MetaEffect            = MetaPrefix + "effect"
	MetaReturnedRecords   = MetaPrefix + "returnedRecords"

	// What every tool's _meta says of the server's flow control (package
	// server sets them): MetaProgressIntervalMs is the shortest time
	// between two progress notifications of one request (reports in
	// between are coalesced); MetaQueueCapacity is the messages one
	// outbound stream of the transport that answered the listing may hold
	// (progress beyond it is dropped, oldest first, and flagged for
	// refetch; a final response never is).
	MetaProgressIntervalMs = MetaPrefix + "progressIntervalMs"
	MetaQueueCapacity      = MetaPrefix + "queueCapacity"
	// MetaKeepAliveMs is the SSE keepalive cadence of a Streamable HTTP
	// server ("mcprel serve --http" sets it from --keepalive; 0: none).
	MetaKeepAliveMs = MetaPrefix + "keepAliveMs"
)

// MetaRefetch is the _meta key of the refetch flag. When the server had to
// drop progress or notifications on a stream, or replace a queued progress
// value with a newer one, because the client read too slowly, the next
// response written on that stream carries
// "_meta": {"dev.mcprel/refetch": true}: what the client saw on the stream
// is incomplete, so it should refetch the state it cares about from the
// authoritative source (tools/list, resources/read, a lookup tool) rather
// than trust the notifications it got.
const MetaRefetch = MetaPrefix + "refetch"

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

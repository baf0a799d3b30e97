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

// ResultType values for the modern era's resultType member.
const (
	ResultComplete      = "complete"
	ResultInputRequired = "input_required"
)

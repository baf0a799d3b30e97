package mcp

import "encoding/json"

// Methods the server calls on the client (legacy era; the modern era asks
// for the same through input_required results).
const (
	MethodCreateMessage = "sampling/createMessage"
	MethodElicit        = "elicitation/create"
	MethodListRoots     = "roots/list"
)

// SamplingMessage is one message of a sampling request.
type SamplingMessage struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// CreateMessageParams are the params of sampling/createMessage.
type CreateMessageParams struct {
	Messages         []SamplingMessage `json:"messages"`
	MaxTokens        int               `json:"maxTokens"`
	SystemPrompt     string            `json:"systemPrompt,omitempty"`
	Temperature      *float64          `json:"temperature,omitempty"`
	StopSequences    []string          `json:"stopSequences,omitempty"`
	ModelPreferences json.RawMessage   `json:"modelPreferences,omitempty"`
	IncludeContext   string            `json:"includeContext,omitempty"`
}

// CreateMessageResult is the client's answer to sampling/createMessage.
type CreateMessageResult struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Model      string          `json:"model"`
	StopReason string          `json:"stopReason,omitempty"`
}

// ElicitParams are the params of elicitation/create (form mode).
type ElicitParams struct {
	Mode            string          `json:"mode,omitempty"`
	Message         string          `json:"message"`
	RequestedSchema json.RawMessage `json:"requestedSchema,omitempty"`
}

// ElicitResult is the client's answer to elicitation/create: Action is
// "accept", "decline" or "cancel"; Content holds the accepted values.
type ElicitResult struct {
	Action  string         `json:"action"`
	Content map[string]any `json:"content,omitempty"`
}

// InputRequest is one request a server asks the client to fulfil before it
// retries (2026-07-28 multi round-trip requests): an elicitation/create,
// sampling/createMessage or roots/list request without an id.
type InputRequest struct {
	Method string `json:"method"`
	Params any    `json:"params"`
}

// InputRequiredResult is a result of type "input_required": the client
// fulfils InputRequests and retries the original request, with a new id,
// carrying inputResponses and RequestState unchanged.
type InputRequiredResult struct {
	ResultBase
	InputRequests map[string]InputRequest `json:"inputRequests,omitempty"`
	RequestState  string                  `json:"requestState,omitempty"`
}

// MissingCapabilityData is the data member of a CodeMissingClientCapability
// error: the capabilities required, as a ClientCapabilities object.
type MissingCapabilityData struct {
	RequiredCapabilities map[string]map[string]any `json:"requiredCapabilities"`
}

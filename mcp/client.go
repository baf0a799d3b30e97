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

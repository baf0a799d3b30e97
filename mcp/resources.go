package mcp

import "encoding/json"

// Resource describes a readable resource, as resources/list returns it.
type Resource struct {
	URI         string       `json:"uri"`
	Name        string       `json:"name"`
	Title       string       `json:"title,omitempty"`
	Description string       `json:"description,omitempty"`
	MimeType    string       `json:"mimeType,omitempty"`
	Size        *int64       `json:"size,omitempty"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

// ResourceTemplate describes a family of resources by an RFC 6570 URI
// template.
type ResourceTemplate struct {
	URITemplate string       `json:"uriTemplate"`
	Name        string       `json:"name"`
	Title       string       `json:"title,omitempty"`
	Description string       `json:"description,omitempty"`
	MimeType    string       `json:"mimeType,omitempty"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

// ListResourcesResult answers resources/list.
type ListResourcesResult struct {
	ResultBase
	Cacheable
	Resources  []Resource `json:"resources"`
	NextCursor string     `json:"nextCursor,omitempty"`
}

// ListResourceTemplatesResult answers resources/templates/list.
type ListResourceTemplatesResult struct {
	ResultBase
	Cacheable
	ResourceTemplates []ResourceTemplate `json:"resourceTemplates"`
	NextCursor        string             `json:"nextCursor,omitempty"`
}

// ReadResourceParams are the params of resources/read.
type ReadResourceParams struct {
	URI *string `json:"uri"`
}

// ReadResourceResult answers resources/read.
type ReadResourceResult struct {
	ResultBase
	Cacheable
	Contents []ResourceContents `json:"contents"`
}

// SubscribeParams are the params of resources/subscribe and unsubscribe
// (legacy).
type SubscribeParams struct {
	URI *string `json:"uri"`
}

// ResourceUpdatedParams are the params of notifications/resources/updated.
type ResourceUpdatedParams struct {
	Meta Meta   `json:"_meta,omitempty"`
	URI  string `json:"uri"`
}

// PromptArgument describes one argument of a prompt.
type PromptArgument struct {
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required,omitempty"`
}

// Prompt describes a prompt template, as prompts/list returns it.
type Prompt struct {
	Name        string           `json:"name"`
	Title       string           `json:"title,omitempty"`
	Description string           `json:"description,omitempty"`
	Arguments   []PromptArgument `json:"arguments,omitempty"`
	Meta        Meta             `json:"_meta,omitempty"`
}

// ListPromptsResult answers prompts/list.
type ListPromptsResult struct {
	ResultBase
	Cacheable
	Prompts    []Prompt `json:"prompts"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

// GetPromptParams are the params of prompts/get.
type GetPromptParams struct {
	Name      *string           `json:"name"`
	Arguments map[string]string `json:"arguments,omitempty"`
}

// PromptMessage is one message of a prompt.
type PromptMessage struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// UnmarshalJSON decodes a message whose content block may be of any type.
func (m *PromptMessage) UnmarshalJSON(data []byte) error {
	var aux struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	c, err := UnmarshalContent(aux.Content)
	if err != nil {
		return err
	}
	m.Role, m.Content = aux.Role, c
	return nil
}

// GetPromptResult answers prompts/get.
type GetPromptResult struct {
	ResultBase
	Description string          `json:"description,omitempty"`
	Messages    []PromptMessage `json:"messages"`
}

// CompletionRef names what is being completed: a prompt (Type
// "ref/prompt", Name) or a resource template (Type "ref/resource", URI).
type CompletionRef struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
	URI  string `json:"uri,omitempty"`
}

// CompleteParams are the params of completion/complete.
type CompleteParams struct {
	Ref      *CompletionRef `json:"ref"`
	Argument *struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"argument"`
	Context *struct {
		Arguments map[string]string `json:"arguments,omitempty"`
	} `json:"context,omitempty"`
}

// Completion is the body of a completion result.
type Completion struct {
	Values  []string `json:"values"`
	Total   *int     `json:"total,omitempty"`
	HasMore bool     `json:"hasMore,omitempty"`
}

// CompleteResult answers completion/complete.
type CompleteResult struct {
	ResultBase
	Completion Completion `json:"completion"`
}

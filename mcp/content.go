package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcprel/mcprel/jsonrpc"
)

// Content is one block of a tool result or prompt message. The concrete
// types are TextContent, ImageContent, AudioContent, EmbeddedResource and
// ResourceLink; each marshals with its "type" member.
type Content interface {
	ContentType() string
}

// Annotations are optional hints on a content block.
type Annotations struct {
	Audience     []string `json:"audience,omitempty"`
	Priority     *float64 `json:"priority,omitempty"`
	LastModified string   `json:"lastModified,omitempty"`
}

// TextContent is plain text.
type TextContent struct {
	Text        string       `json:"text"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

// ImageContent is a base64-encoded image.
type ImageContent struct {
	Data        string       `json:"data"`
	MimeType    string       `json:"mimeType"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

// AudioContent is base64-encoded audio.
type AudioContent struct {
	Data        string       `json:"data"`
	MimeType    string       `json:"mimeType"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

// ResourceContents is the body of a resource: Text or Blob (base64), never
// both.
type ResourceContents struct {
	URI      string  `json:"uri"`
	MimeType string  `json:"mimeType,omitempty"`
	Text     *string `json:"text,omitempty"`
	Blob     *string `json:"blob,omitempty"`
	Meta     Meta    `json:"_meta,omitempty"`
}

// EmbeddedResource carries a resource's contents inline.
type EmbeddedResource struct {
	Resource    ResourceContents `json:"resource"`
	Annotations *Annotations     `json:"annotations,omitempty"`
	Meta        Meta             `json:"_meta,omitempty"`
}

// ResourceLink points at a resource the client may read.
type ResourceLink struct {
	URI         string       `json:"uri"`
	Name        string       `json:"name"`
	Title       string       `json:"title,omitempty"`
	Description string       `json:"description,omitempty"`
	MimeType    string       `json:"mimeType,omitempty"`
	Size        *int64       `json:"size,omitempty"`
	Annotations *Annotations `json:"annotations,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

func (*TextContent) ContentType() string      { return "text" }
func (*ImageContent) ContentType() string     { return "image" }
func (*AudioContent) ContentType() string     { return "audio" }
func (*EmbeddedResource) ContentType() string { return "resource" }
func (*ResourceLink) ContentType() string     { return "resource_link" }

// marshalTyped encodes v (a pointer to one of the content structs) with a
// leading "type" member.
func marshalTyped(typ string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)+len(typ)+12)
	out = append(out, `{"type":"`...)
	out = append(out, typ...)
	out = append(out, '"')
	if len(body) > 2 {
		out = append(out, ',')
	}
	return append(out, body[1:]...), nil
}

// The MarshalJSON methods go through a local type without methods to avoid
// recursing into themselves.

func (c *TextContent) MarshalJSON() ([]byte, error) {
	type plain TextContent
	return marshalTyped(c.ContentType(), (*plain)(c))
}

func (c *ImageContent) MarshalJSON() ([]byte, error) {
	type plain ImageContent
	return marshalTyped(c.ContentType(), (*plain)(c))
}

func (c *AudioContent) MarshalJSON() ([]byte, error) {
	type plain AudioContent
	return marshalTyped(c.ContentType(), (*plain)(c))
}

func (c *EmbeddedResource) MarshalJSON() ([]byte, error) {
	type plain EmbeddedResource
	return marshalTyped(c.ContentType(), (*plain)(c))
}

func (c *ResourceLink) MarshalJSON() ([]byte, error) {
	type plain ResourceLink
	return marshalTyped(c.ContentType(), (*plain)(c))
}

// RawContent is a content block kept as the JSON it came as, encoded
// again byte for byte: for a program that passes blocks on without reading
// them (a gateway), a block of any type — one this package does not know
// included — survives unchanged, at the cost of one copy.
type RawContent json.RawMessage

// ContentType reads the block's "type" member ("" when it has none).
func (c RawContent) ContentType() string {
	var head struct {
		Type string `json:"type"`
	}
	json.Unmarshal(c, &head)
	return head.Type
}

// MarshalJSON returns the block as it came.
func (c RawContent) MarshalJSON() ([]byte, error) {
	if len(c) == 0 {
		return []byte("null"), nil
	}
	return c, nil
}

var errNotJSONResult = errors.New("mcp: a tools/call result that is not valid JSON")

// PassThrough decodes a tools/call result for a program that passes it
// on (a gateway): its content blocks stay RawContent and its
// structuredContent raw JSON, so that it is encoded again as it came,
// whatever the blocks' types. It checks that data is JSON in the one pass
// that splits it, without a reflective decode: only _meta, isError and
// resultType are decoded, and the rest is sliced out of a copy of data.
func PassThrough(data []byte) (*CallToolResult, error) {
	data = bytes.Clone(data) // the blocks are kept: nothing of the caller's buffer is
	r := &CallToolResult{Content: []Content{}}
	var err error
	member := func(key, v []byte) bool {
		if string(v) == "null" {
			switch string(key) {
			case "content":
				r.Content = []Content{}
			case "structuredContent":
				r.StructuredContent = nil
			case "_meta":
				r.Meta = nil
			}
			return true
		}
		switch string(key) {
		case "content":
			r.Content = r.Content[:0]
			err = jsonrpc.Elements(v, func(block []byte) bool {
				r.Content = append(r.Content, RawContent(block[:len(block):len(block)])) // an append to one block never reaches the next
				return true
			})
		case "structuredContent":
			r.StructuredContent = json.RawMessage(v)
		case "isError":
			switch string(v) {
			case "true":
				r.IsError = true
			case "false":
				r.IsError = false
			default:
				err = json.Unmarshal(v, &r.IsError)
			}
		case "resultType":
			if s, ok := jsonrpc.PlainString(v); ok {
				r.ResultType = s
			} else {
				err = json.Unmarshal(v, &r.ResultType)
			}
		case "_meta":
			err = r.Meta.UnmarshalJSON(v)
		}
		return err == nil
	}
	// Checked as JSON in the pass that splits it: its bytes are read once.
	if e := jsonrpc.ValidMembers(data, member); e != nil {
		if e == jsonrpc.ErrInvalidJSON {
			return nil, errNotJSONResult
		}
		return nil, fmt.Errorf("mcp: a tools/call result: %w", e)
	}
	if err != nil {
		return nil, fmt.Errorf("mcp: a tools/call result: %w", err)
	}
	return r, nil
}

// Text returns a text content block.
func Text(s string) *TextContent { return &TextContent{Text: s} }

// UnmarshalContent decodes one content block by its "type" member.
func UnmarshalContent(raw json.RawMessage) (Content, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, err
	}
	var c Content
	switch head.Type {
	case "text":
		c = new(TextContent)
	case "image":
		c = new(ImageContent)
	case "audio":
		c = new(AudioContent)
	case "resource":
		c = new(EmbeddedResource)
	case "resource_link":
		c = new(ResourceLink)
	default:
		return nil, fmt.Errorf("mcp: unknown content type %q", head.Type)
	}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, err
	}
	return c, nil
}

// UnmarshalJSON decodes a result whose content blocks may be of any type.
// structuredContent is kept as the raw JSON it was, so that decoding and
// encoding a result again (a stored result being replayed, say) changes
// nothing: through any, a number beyond float64's 53 bits would not
// survive.
func (r *CallToolResult) UnmarshalJSON(data []byte) error {
	type plain CallToolResult
	var aux struct {
		plain
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
	}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	*r = CallToolResult(aux.plain)
	r.StructuredContent = nil
	if len(aux.StructuredContent) > 0 && string(aux.StructuredContent) != "null" {
		r.StructuredContent = aux.StructuredContent
	}
	r.Content = make([]Content, 0, len(aux.Content))
	for _, raw := range aux.Content {
		c, err := UnmarshalContent(raw)
		if err != nil {
			return err
		}
		r.Content = append(r.Content, c)
	}
	return nil
}

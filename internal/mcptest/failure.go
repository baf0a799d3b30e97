package mcptest

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/mcprel/mcprel/mcp"
)

// Failure reads the structured failure of a tools/call result, failing the
// test unless the result has the one shape mcprel gives every tool
// failure: isError set, no structuredContent (that belongs to the tool's
// outputSchema), the body under _meta["dev.mcprel/failure"] and the same
// body as the JSON text of the only content block.
func Failure(t testing.TB, result json.RawMessage) mcp.Failure {
	t.Helper()
	f, problem := ParseFailure(result)
	if problem != "" {
		t.Fatalf("%s: %s", problem, result)
	}
	return f
}

// ParseFailure is Failure for callers that judge the outcome themselves:
// problem says what is wrong with the result's shape, "" when nothing is.
func ParseFailure(result json.RawMessage) (f mcp.Failure, problem string) {
	var res struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Meta              struct {
			Failure json.RawMessage `json:"dev.mcprel/failure"`
		} `json:"_meta"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	switch {
	case json.Unmarshal(result, &res) != nil:
		return f, "not a tools/call result"
	case !res.IsError:
		return f, "isError is not set"
	case res.StructuredContent != nil:
		return f, "a failed result carries structuredContent"
	case len(res.Content) != 1 || res.Content[0].Type != "text":
		return f, "a failed result's content is not one text block"
	case res.Meta.Failure == nil:
		return f, `_meta["dev.mcprel/failure"] is missing`
	}
	var fromText mcp.Failure
	if err := json.Unmarshal([]byte(res.Content[0].Text), &fromText); err != nil {
		return f, "the text content is not a failure body"
	}
	if err := json.Unmarshal(res.Meta.Failure, &f); err != nil || f.Code == "" {
		return f, `_meta["dev.mcprel/failure"] is not a failure body`
	}
	a, _ := json.Marshal(f)
	b, _ := json.Marshal(fromText)
	if !bytes.Equal(a, b) {
		return f, "the text content and _meta disagree"
	}
	return f, ""
}

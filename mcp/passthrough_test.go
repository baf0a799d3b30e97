package mcp_test

import (
	"encoding/json"
	"testing"

	"github.com/mcprel/mcprel/mcp"
)

// A result passed on is encoded again as it came: its content blocks byte
// for byte, one of a type this package does not know included, and its
// structuredContent with numbers no float64 holds.
func TestPassThroughKeepsWhatItDoesNotRead(t *testing.T) {
	in := `{"content":[{"type":"text","text":"a\u00e9\"b"},{"type":"hologram","frames":[1,2,3],"x":{"y":null}}],` +
		`"structuredContent":{"n":12345678901234567890},"isError":true,"_meta":{"k":"v"}}`
	res, err := mcp.PassThrough([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || len(res.Content) != 2 || res.Content[1].ContentType() != "hologram" || res.Meta["k"] != "v" {
		t.Fatalf("decoded %+v", res)
	}
	out, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var got, want struct {
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
	}
	json.Unmarshal(out, &got)
	json.Unmarshal([]byte(in), &want)
	if len(got.Content) != 2 || string(got.Content[0]) != string(want.Content[0]) || string(got.Content[1]) != string(want.Content[1]) {
		t.Fatalf("content came out %s, want %s", got.Content, want.Content)
	}
	if string(got.StructuredContent) != `{"n":12345678901234567890}` {
		t.Fatalf("structuredContent came out %s", got.StructuredContent)
	}
	if _, err := mcp.PassThrough([]byte(`{"content":"no"}`)); err == nil {
		t.Fatal("a result whose content is not a list was passed through")
	}
}

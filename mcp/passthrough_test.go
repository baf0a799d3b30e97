package mcp_test

import (
	"bytes"
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

// passThroughByJSON is PassThrough as encoding/json's reflective decode
// reads a result, the way it was done before it split results itself.
func passThroughByJSON(data []byte) (*mcp.CallToolResult, error) {
	type plain mcp.CallToolResult
	var aux struct {
		plain
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
	}
	if err := json.Unmarshal(data, &aux); err != nil {
		return nil, err
	}
	r := mcp.CallToolResult(aux.plain)
	r.StructuredContent = nil
	if len(aux.StructuredContent) > 0 && string(aux.StructuredContent) != "null" {
		r.StructuredContent = aux.StructuredContent
	}
	r.Content = make([]mcp.Content, len(aux.Content))
	for i, raw := range aux.Content {
		r.Content[i] = mcp.RawContent(raw)
	}
	return &r, nil
}

// PassThrough reads a result as encoding/json reads it into the result's
// type: the same result, encoded again to the same bytes, and the same
// refusals. Where they part is on purpose: a result that is null, or
// whose members are spelled in another case, is not a result.
func TestPassThroughAgreesWithEncodingJSON(t *testing.T) {
	results := []string{
		`{}`, `{"content":[]}`, `{"content":null,"structuredContent":null,"_meta":null,"isError":null,"resultType":null}`,
		` { "content" : [ {"type":"text","text":"x"} , {"type":"image","data":"AA==","mimeType":"image/png"} ] , "isError" : false } `,
		`{"content":[{"type":"text","text":"first"}],"content":[{"type":"text","text":"second"}]}`,
		`{"isError":true,"isError":null}`, `{"_meta":{"a":1},"_meta":{"b":2}}`, `{"_meta":{}}`,
		`{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up","version":"1"}}}`,
		`{"content":[],"unknown":{"x":[1,2]},"structuredContent":[1,"two"]}`,
		`{"resultType":"comp\u006cete"}`,
	}
	refused := []string{
		`{"content":"no"}`, `{"content":{}}`, `{"isError":"yes"}`, `{"isError":1}`, `{"_meta":[1]}`, `{"_meta":"m"}`,
		`{"resultType":3}`, `[]`, `"x"`, `{"content":[1,]}`, `{`, ``,
		`{"content":[tru]}`, `{"structuredContent":{]}`, `{"content":[]}x`, `{"content":[{"type":"text","text":"x}]}`,
	}
	for _, in := range results {
		want, err := passThroughByJSON([]byte(in))
		if err != nil {
			t.Fatalf("%s: the reference refused it: %v", in, err)
		}
		got, err := mcp.PassThrough([]byte(in))
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) || got.IsError != want.IsError || got.ResultType != want.ResultType {
			t.Errorf("%s:\n got %s\nwant %s", in, g, w)
		}
	}
	for _, in := range refused {
		if _, err := passThroughByJSON([]byte(in)); err == nil {
			t.Fatalf("%s: the reference accepted it", in)
		}
		if res, err := mcp.PassThrough([]byte(in)); err == nil {
			t.Errorf("%s: passed through as %+v", in, res)
		}
	}
	if res, err := mcp.PassThrough([]byte(`null`)); err == nil {
		t.Errorf("null passed through as %+v", res)
	}
	if res, err := mcp.PassThrough([]byte(`{"Content":[{"type":"text","text":"x"}],"ISERROR":true}`)); err != nil || len(res.Content) > 0 || res.IsError {
		t.Errorf("members in another case read as %+v, %v", res, err)
	}
	// The blocks are the result's own: the caller may reuse its buffer.
	buf := []byte(`{"content":[{"type":"text","text":"mine"}]}`)
	res, err := mcp.PassThrough(buf)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, bytes.Repeat([]byte("x"), len(buf)))
	// Nor does a block reach into the next: the blocks share one copy.
	two, err := mcp.PassThrough([]byte(`{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = append(two.Content[0].(mcp.RawContent), "!!!!!!!!!!!!!!!!"...)
	if b, _ := json.Marshal(two.Content[1]); string(b) != `{"type":"text","text":"b"}` {
		t.Errorf("an append to the first block changed the second: %s", b)
	}
	if b, _ := json.Marshal(res.Content[0]); string(b) != `{"type":"text","text":"mine"}` {
		t.Errorf("a block holds the caller's buffer: %s", b)
	}
}

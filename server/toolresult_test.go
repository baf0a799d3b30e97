package server

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// toolStrings are texts that exercise every rule of encoding a JSON
// string: HTML's characters, control characters, quotes and backslashes,
// multi-byte UTF-8, invalid UTF-8, U+2028 and U+2029.
var toolStrings = []string{
	"", "hello", "a b", `say "hi" \ bye`, "<b>&amp;</b>", "line\nbreak\r\ttab\b\f\x00\x01\x1f\x7f",
	"é日本語🎉", "\u2028\u2029x\u2027\u202a", "bad \xff\xfe utf8 \xe2\x80", "\xe2\x80\xa8", "\xed\xa0\x80 surrogate",
	strings.Repeat("x", 300) + "<",
}

// rawBlocks are content blocks as JSON, some of them not compact, one
// with whitespace and HTML characters inside its strings, one of a type
// mcp does not know.
var rawBlocks = []string{
	`{"type":"text","text":"call 1"}`,
	` { "type" : "text" , "text" : "a < b && c > d \u003c" } `,
	"{\"type\":\"text\",\"text\":\"ls\u2028sep \xe2\x80\xa9 \xff\"}",
	`{"type":"hologram","frames":[1, 2,3 ],"x":{"y":null,"z":[true,false]},"s":"\\\" <"}`,
	"{\n\t\"type\": \"image\",\r\n\"data\": \"AA==\", \"mimeType\": \"image/png\"}",
	`"just a string"`, `12.5e3`, `[]`,
}

// toolResults are results of every shape the fast encoder handles, and
// of the shapes it leaves to json.Marshal, including ones it refuses.
func toolResults() []*mcp.CallToolResult {
	var out []*mcp.CallToolResult
	for _, s := range toolStrings {
		out = append(out, &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(s)}})
		out = append(out, &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(s), mcp.Text("second")}, IsError: true})
	}
	for _, raw := range rawBlocks {
		out = append(out, &mcp.CallToolResult{Content: []mcp.Content{mcp.RawContent(raw)}})
		out = append(out, &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("x"), mcp.RawContent(raw)}, StructuredContent: json.RawMessage(raw)})
	}
	p := 0.5
	out = append(out,
		&mcp.CallToolResult{},
		&mcp.CallToolResult{Content: []mcp.Content{}},
		&mcp.CallToolResult{Content: []mcp.Content{nil, mcp.RawContent(nil), (*mcp.TextContent)(nil)}},
		&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "t", Annotations: &mcp.Annotations{Priority: &p}}}},
		&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "t", Meta: mcp.Meta{"k": "<v>"}}}},
		&mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: "AA==", MimeType: "image/png"}}},
		&mcp.CallToolResult{Content: []mcp.Content{&mcp.ResourceLink{URI: "file:///a&b", Name: "a"}}},
		&mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: map[string]any{"b": 1, "a": "<x>"}},
		&mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: json.RawMessage(nil)},
		&mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: json.RawMessage("null")},
		&mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: struct{ N int }{3}},
		&mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: []int(nil)},
		&mcp.CallToolResult{Content: []mcp.Content{mcp.Text("m")}, ResultBase: mcp.ResultBase{Meta: mcp.Meta{"k": "v", "a": []int{1}}}},
		&mcp.CallToolResult{Content: []mcp.Content{mcp.Text("m")}, ResultBase: mcp.ResultBase{ResultType: "complete"}},
		&mcp.CallToolResult{Content: []mcp.Content{mcp.Text("m")}, ResultBase: mcp.ResultBase{ResultType: "in<put>", Meta: mcp.Meta{}}},
		// Refused by json.Marshal, and so by both.
		&mcp.CallToolResult{Content: []mcp.Content{mcp.RawContent(`{"type":"text",}`)}},
		&mcp.CallToolResult{Content: []mcp.Content{mcp.RawContent(`{"type":"text"} x`)}},
		&mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: json.RawMessage(`{`)},
		&mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: func() {}},
		&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "t", Meta: mcp.Meta{"f": func() {}}}}},
		&mcp.CallToolResult{Content: []mcp.Content{}, ResultBase: mcp.ResultBase{Meta: mcp.Meta{"f": func() {}}}},
	)
	return out
}

// checkToolResponse checks that the fast encoder writes what
// json.Marshal writes for res, or leaves res to it.
func checkToolResponse(t *testing.T, srv *Server, era mcp.Era, id jsonrpc.ID, res *mcp.CallToolResult) {
	t.Helper()
	want, wantErr := srv.encodeResultReflect(era, id, res)
	got, ok := srv.appendToolResponse(nil, era, id, res)
	switch {
	case !ok && wantErr == nil && (era != mcp.Modern || (res.ResultType == "" && len(res.Meta) == 0)):
		t.Errorf("%s %#v: left to json.Marshal, which encodes it as\n%s", era, res, want)
	case ok && wantErr != nil:
		t.Errorf("%s %#v: encoded as %s where json.Marshal refuses it: %v", era, res, got, wantErr)
	case ok && string(got) != string(want):
		t.Errorf("%s %#v:\n got %s\nwant %s", era, res, got, want)
	}
}

// The fast encoder of a tools/call response writes byte for byte what
// json.Marshal writes, in both eras, or leaves the result to it.
func TestToolResponseMatchesJSONMarshal(t *testing.T) {
	srv, err := New(mcp.Implementation{Name: "t<&>", Version: "1\u2028"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := []jsonrpc.ID{jsonrpc.IntID(7), jsonrpc.StringID("a\"<b>")}
	for _, era := range []mcp.Era{mcp.Legacy, mcp.Modern} {
		for i, res := range toolResults() {
			checkToolResponse(t, srv, era, ids[i%len(ids)], res)
		}
	}
}

// Every string of bytes a text block may hold — all one- and two-byte
// strings, and random ones from a fixed seed — and the same bytes as a
// raw block's string, encode as json.Marshal encodes them.
func TestToolResponseStringsMatchJSONMarshal(t *testing.T) {
	srv, err := New(mcp.Implementation{Name: "t", Version: "1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for a := range 256 {
		texts = append(texts, string([]byte{byte(a)}))
		for b := range 256 {
			if a >= 0x20 && a < 0x7f && b >= 0x20 && b < 0x7f && a != '<' && b != '<' {
				continue // plain ASCII pairs tell nothing the singles do not
			}
			texts = append(texts, string([]byte{byte(a), byte(b)}))
		}
	}
	rng := rand.New(rand.NewPCG(42, 42))
	alphabet := []byte("ab <>&\"\\\n\t\x00\x1f\xe2\x80\xa8\xa9\xff\xc3\xa9 {}[],:")
	for range 2000 {
		s := make([]byte, rng.IntN(24))
		for i := range s {
			s[i] = alphabet[rng.IntN(len(alphabet))]
		}
		texts = append(texts, string(s))
	}
	for _, s := range texts {
		res := &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(s)}}
		checkToolResponse(t, srv, mcp.Legacy, jsonrpc.IntID(1), res)
		// The same text as a raw block: JSON that is not compact, its
		// string as json.Marshal wrote it.
		enc, _ := json.Marshal(s)
		raw := mcp.RawContent(`{ "type" : "text", "text" :` + string(enc) + " }")
		res = &mcp.CallToolResult{Content: []mcp.Content{raw}, StructuredContent: json.RawMessage(`[ ` + string(enc) + ` ]`)}
		checkToolResponse(t, srv, mcp.Modern, jsonrpc.IntID(1), res)
		// And raw, unescaped, as a peer may send it (valid JSON or not).
		raw = mcp.RawContent(`{"text":"` + s + `"}`)
		checkToolResponse(t, srv, mcp.Legacy, jsonrpc.IntID(1), &mcp.CallToolResult{Content: []mcp.Content{raw}})
	}
}

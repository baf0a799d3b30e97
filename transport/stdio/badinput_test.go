package stdio_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

const maxMessage = 4096

// badInputs are frames a client may send by mistake, each with the exact
// outcome it must get. wantCode 0 means "no response at all" (a notification,
// broken or not, is never answered). They all run on one connection, each
// followed by a valid request, so the table also proves the server keeps
// serving.
var badInputs = []struct {
	name string
	era  mcp.Era // the exchange the frame is sent in
	// beforeInit runs the row on a connection that never initialized, where
	// a request without a modern _meta has no era to be served in.
	beforeInit bool
	frame      string
	wantCode   int64
	wantID     *jsonrpc.ID // nil: the error carries no id
	check      func(t *testing.T, f mcptest.Frame)
}{
	{name: "invalid JSON", frame: `{"jsonrpc":"2.0","id":1,"method":`, wantCode: jsonrpc.CodeParseError},
	{name: "not an object", frame: `"ping"`, wantCode: jsonrpc.CodeInvalidRequest},
	{name: "wrong jsonrpc version", frame: `{"jsonrpc":"1.0","id":11,"method":"ping"}`, wantCode: jsonrpc.CodeInvalidRequest, wantID: idp(11)},
	{name: "missing jsonrpc version", frame: `{"id":12,"method":"ping"}`, wantCode: jsonrpc.CodeInvalidRequest, wantID: idp(12)},
	{name: "null id", frame: `{"jsonrpc":"2.0","id":null,"method":"ping"}`, wantCode: jsonrpc.CodeInvalidRequest},
	{name: "fractional id", frame: `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, wantCode: jsonrpc.CodeInvalidRequest},
	{name: "batch array", frame: `[{"jsonrpc":"2.0","id":13,"method":"ping"}]`, wantCode: jsonrpc.CodeInvalidRequest},
	{name: "oversize message", frame: `{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("x", 3*maxMessage) + `"}}}`, wantCode: jsonrpc.CodeInvalidRequest, wantID: idp(14),
		check: func(t *testing.T, f mcptest.Frame) {
			if !strings.Contains(f.Error.Message, "4096-byte limit") {
				t.Errorf("message %q does not name the limit", f.Error.Message)
			}
		}},
	{name: "unknown method, legacy", era: mcp.Legacy, frame: `{"jsonrpc":"2.0","id":15,"method":"tools/frobnicate"}`, wantCode: jsonrpc.CodeMethodNotFound, wantID: idp(15)},
	{name: "unknown method, modern", era: mcp.Modern, frame: modernFrame(16, "tools/frobnicate", ""), wantCode: jsonrpc.CodeMethodNotFound, wantID: idp(16)},
	{name: "removed method in a modern exchange", era: mcp.Modern, frame: modernFrame(17, "ping", ""), wantCode: jsonrpc.CodeMethodNotFound, wantID: idp(17)},
	{name: "initialize in a modern exchange", era: mcp.Modern, frame: modernFrame(18, "initialize", `"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}`), wantCode: jsonrpc.CodeMethodNotFound, wantID: idp(18)},
	{name: "tool name of the wrong type", era: mcp.Legacy, frame: `{"jsonrpc":"2.0","id":19,"method":"tools/call","params":{"name":5}}`, wantCode: jsonrpc.CodeInvalidParams, wantID: idp(19),
		check: func(t *testing.T, f mcptest.Frame) {
			if !strings.Contains(f.Error.Message, "name must be a string") {
				t.Errorf("message %q does not name the field", f.Error.Message)
			}
		}},
	{name: "arguments not an object", era: mcp.Modern, frame: modernFrame(20, "tools/call", `"name":"echo","arguments":"hi"`), wantCode: jsonrpc.CodeInvalidParams, wantID: idp(20)},
	{name: "params not an object", frame: `{"jsonrpc":"2.0","id":21,"method":"tools/list","params":[1]}`, wantCode: jsonrpc.CodeInvalidRequest, wantID: idp(21)},
	{name: "unknown tool", era: mcp.Legacy, frame: `{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"nope"}}`, wantCode: jsonrpc.CodeInvalidParams, wantID: idp(22)},
	{name: "modern request without _meta", beforeInit: true, frame: `{"jsonrpc":"2.0","id":23,"method":"tools/list","params":{}}`, wantCode: jsonrpc.CodeInvalidParams, wantID: idp(23)},
	{name: "modern request without clientCapabilities", beforeInit: true, frame: `{"jsonrpc":"2.0","id":24,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, wantCode: jsonrpc.CodeInvalidParams, wantID: idp(24)},
	{name: "legacy request before initialize", beforeInit: true, frame: `{"jsonrpc":"2.0","id":32,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`, wantCode: jsonrpc.CodeInvalidParams, wantID: idp(32),
		check: func(t *testing.T, f mcptest.Frame) {
			if !strings.Contains(f.Error.Message, "initialize") {
				t.Errorf("message %q should point at initialize or _meta", f.Error.Message)
			}
		}},
	{name: "ping before initialize", beforeInit: true, frame: `{"jsonrpc":"2.0","id":33,"method":"ping"}`},
	{name: "protocol version of the wrong type", frame: `{"jsonrpc":"2.0","id":25,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":2026,"io.modelcontextprotocol/clientCapabilities":{}}}}`, wantCode: jsonrpc.CodeInvalidParams, wantID: idp(25)},
	{name: "unsupported protocol version", frame: `{"jsonrpc":"2.0","id":26,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}`, wantCode: mcp.CodeUnsupportedVersion, wantID: idp(26),
		check: func(t *testing.T, f mcptest.Frame) {
			var data mcp.UnsupportedVersionData
			if err := json.Unmarshal(f.Error.Data, &data); err != nil || data.Requested != "1900-01-01" || len(data.Supported) == 0 || data.Supported[0] != mcp.Version20260728 {
				t.Errorf("error data = %s, want supported and requested", f.Error.Data)
			}
		}},
	{name: "legacy version in _meta", frame: `{"jsonrpc":"2.0","id":27,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}}}`, wantCode: mcp.CodeUnsupportedVersion, wantID: idp(27)},
	{name: "second initialize", era: mcp.Legacy, frame: `{"jsonrpc":"2.0","id":28,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`, wantCode: jsonrpc.CodeInvalidRequest, wantID: idp(28)},
	{name: "invalid logging level", era: mcp.Legacy, frame: `{"jsonrpc":"2.0","id":29,"method":"logging/setLevel","params":{"level":"loud"}}`, wantCode: jsonrpc.CodeInvalidParams, wantID: idp(29)},
	{name: "unknown list cursor", era: mcp.Legacy, frame: `{"jsonrpc":"2.0","id":30,"method":"tools/list","params":{"cursor":"abc"}}`, wantCode: jsonrpc.CodeInvalidParams, wantID: idp(30)},
	{name: "oversize message with two ids", frame: `{"jsonrpc":"2.0","id":34,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("x", 3*maxMessage) + `"}},"id":35}`, wantCode: jsonrpc.CodeInvalidRequest, wantID: idp(35)},
	{name: "id with a lone surrogate", era: mcp.Modern, frame: modernFrameRawID(`"a\ud800"`, "tools/frobnicate"), wantCode: jsonrpc.CodeMethodNotFound, wantID: rawidp(`"a\ud800"`),
		check: func(t *testing.T, f mcptest.Frame) {
			if !strings.Contains(f.Raw, `"id":"a\ud800"`) {
				t.Errorf("the id was not echoed as sent: %s", f.Raw)
			}
		}},
	{name: "id with invalid UTF-8", era: mcp.Modern, frame: modernFrameRawID("\"b\xfe\"", "tools/frobnicate"), wantCode: jsonrpc.CodeMethodNotFound, wantID: rawidp("\"b\xfe\""),
		check: func(t *testing.T, f mcptest.Frame) {
			if !strings.Contains(f.Raw, "\"id\":\"b\xfe\"") {
				t.Errorf("the id was not echoed as sent: %q", f.Raw)
			}
		}},
	{name: "string id 1 is not integer id 1", era: mcp.Modern, frame: `{"jsonrpc":"2.0","id":"1","method":"tools/frobnicate","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, wantCode: jsonrpc.CodeMethodNotFound, wantID: sidp("1")},

	// Never answered.
	{name: "cancellation with string params", frame: `{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}`},
	{name: "cancellation without params", frame: `{"jsonrpc":"2.0","method":"notifications/cancelled"}`},
	{name: "cancellation with null requestId", frame: `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":null}}`},
	{name: "cancellation with object requestId", frame: `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":{}}}`},
	{name: "cancellation of an unknown request", frame: `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":999}}`},
	{name: "cancellation of initialize", frame: `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0}}`},
	{name: "notification with a wrong version", frame: `{"jsonrpc":"1.0","method":"notifications/initialized"}`},
	{name: "unknown notification", frame: `{"jsonrpc":"2.0","method":"notifications/frobnicated"}`},
	{name: "response to nothing", frame: `{"jsonrpc":"2.0","id":31,"result":{}}`},
	{name: "oversize notification", frame: `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + strings.Repeat("x", 3*maxMessage) + `"}}`},
	{name: "oversize response", frame: `{"jsonrpc":"2.0","id":36,"result":{"data":"` + strings.Repeat("x", 3*maxMessage) + `"}}`},
	{name: "blank line", frame: ``},
}

func idp(n int64) *jsonrpc.ID { id := jsonrpc.IntID(n); return &id }
func rawidp(raw string) *jsonrpc.ID {
	id, err := jsonrpc.ParseID([]byte(raw))
	if err != nil {
		panic(err)
	}
	return &id
}

func modernFrameRawID(rawID, method string) string {
	return `{"jsonrpc":"2.0","id":` + rawID + `,"method":"` + method + `","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
}
func sidp(s string) *jsonrpc.ID { id := jsonrpc.StringID(s); return &id }

func modernFrame(id int, method, params string) string {
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	if params != "" {
		meta += "," + params
	}
	b, _ := json.Marshal(id)
	return `{"jsonrpc":"2.0","id":` + string(b) + `,"method":"` + method + `","params":{` + meta + `}}`
}

func TestBadInputs(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	addEcho(t, srv)
	// Most rows run after the legacy handshake (modern rows carry _meta and
	// are served statelessly beside it); beforeInit rows run on a
	// connection that never initialized.
	initialized := mcptest.Stdio(t, srv, &stdio.Options{MaxMessageBytes: maxMessage})
	initialized.Initialize(mcp.Version20251125)
	fresh := mcptest.Stdio(t, srv, &stdio.Options{MaxMessageBytes: maxMessage})

	syncID := int64(1000)
	for _, tt := range badInputs {
		t.Run(tt.name, func(t *testing.T) {
			c, syncEra := initialized, mcp.Legacy
			if tt.beforeInit {
				c, syncEra = fresh, mcp.Modern
			}
			c.Send(tt.frame)
			if tt.name == "ping before initialize" {
				if f := c.Next(); f.Error != nil || !f.IsResponseTo(jsonrpc.IntID(33)) {
					t.Fatalf("ping before initialize = %s, want an empty result", f.Raw)
				}
			}
			if tt.wantCode != 0 {
				f := c.Next()
				if f.Error == nil || f.Error.Code != tt.wantCode {
					t.Fatalf("got %s, want error code %d", f.Raw, tt.wantCode)
				}
				switch {
				case tt.wantID == nil && f.ID != nil:
					t.Fatalf("error carries id %v, want none: %s", *f.ID, f.Raw)
				case tt.wantID != nil && (f.ID == nil || *f.ID != *tt.wantID):
					t.Fatalf("error id = %v, want %v: %s", f.ID, *tt.wantID, f.Raw)
				}
				if tt.check != nil {
					tt.check(t, f)
				}
			}
			// The next valid request is served, and nothing else was written.
			syncID++
			if before := c.Sync(syncID, syncEra); len(before) > 0 {
				t.Fatalf("unexpected frames:%s", mcptest.Raws(before))
			}
			syncID++
			resp := c.Call(syncID, mcp.MethodToolsCall, mcptest.Params(syncEra, map[string]any{"name": "echo", "arguments": map[string]any{"text": "still here"}}))
			if !strings.Contains(resp.Raw, "still here") {
				t.Fatalf("echo after a bad input = %s", resp.Raw)
			}
		})
	}
}

// TestInvalidArgumentsNameTheField checks that arguments failing the tool's
// schema give a tool error (isError) the model can act on, naming the field.
func TestInvalidArgumentsNameTheField(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	addEcho(t, srv)
	c := mcptest.Stdio(t, srv, nil)
	for i, tc := range []struct {
		args  map[string]any
		field string
	}{
		{map[string]any{"text": 5}, "text"},
		{map[string]any{}, "text"},
		{map[string]any{"text": "x", "extra": true}, "extra"},
	} {
		f := c.Call(int64(i+1), mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "echo", "arguments": tc.args}))
		res := mcptest.Failure(t, f.Result)
		if res.Code != mcp.FailureInvalidArguments || res.Details["field"] != tc.field ||
			!strings.HasPrefix(res.Message, "invalid arguments: "+tc.field+":") || res.Retryable {
			t.Errorf("args %v: got %s, want a non-retryable invalid_arguments error naming %q", tc.args, f.Raw, tc.field)
		}
	}
}

// TestDuplicateInFlightID checks that a second request reusing the id of a
// request still running is refused and not run, and that the first one is
// unaffected.
func TestDuplicateInFlightID(t *testing.T) {
	for _, era := range []mcp.Era{mcp.Legacy, mcp.Modern} {
		t.Run(era.String(), func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			gate := mcptest.NewGate(t, srv, "gate")
			c := mcptest.Stdio(t, srv, nil)
			c.Open(era)
			c.Request(5, mcp.MethodToolsCall, mcptest.Params(era, map[string]any{"name": "gate"}))
			gate.WaitEntered(t)
			c.Request(5, mcp.MethodToolsCall, mcptest.Params(era, map[string]any{"name": "gate"}))
			dup := c.Next()
			if dup.Error == nil || dup.Error.Code != jsonrpc.CodeInvalidRequest || !dup.IsResponseTo(jsonrpc.IntID(5)) || !strings.Contains(dup.Error.Message, "already in flight") {
				t.Fatalf("duplicate got %s, want an invalid-request error for id 5", dup.Raw)
			}
			gate.Release()
			resp, before := c.Await(5)
			if len(before) > 0 || resp.Error != nil || !strings.Contains(string(resp.Result), "released 5") {
				t.Fatalf("original response = %s after %s", resp.Raw, mcptest.Raws(before))
			}
			select {
			case id := <-gate.Entered:
				t.Fatalf("the duplicate ran (entered with id %v)", id)
			default:
			}
			// Once finished, the id may be used again.
			c.Request(5, mcp.MethodToolsCall, mcptest.Params(era, map[string]any{"name": "gate"}))
			if resp, _ := c.Await(5); resp.Error != nil {
				t.Fatalf("reusing a finished id: %s", resp.Raw)
			}
		})
	}
}

func addEcho(t testing.TB, srv *server.Server) {
	t.Helper()
	type args struct {
		Text string `json:"text"`
	}
	err := server.AddTypedTool(srv, server.Tool{Name: "echo", Description: "echo"},
		func(_ contextT, _ *server.CallRequest, in args) (string, error) { return in.Text, nil })
	if err != nil {
		t.Fatal(err)
	}
}

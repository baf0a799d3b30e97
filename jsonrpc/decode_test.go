package jsonrpc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name     string
		frame    string
		wantKind Kind
		wantID   ID
		wantCode int64 // 0: decode succeeds
		method   string
	}{
		{"request with int id", `{"jsonrpc":"2.0","id":7,"method":"ping"}`, KindRequest, IntID(7), 0, "ping"},
		{"request with string id", `{"jsonrpc":"2.0","id":"a-1","method":"tools/list","params":{}}`, KindRequest, StringID("a-1"), 0, "tools/list"},
		{"negative id", `{"jsonrpc":"2.0","id":-3,"method":"ping"}`, KindRequest, IntID(-3), 0, "ping"},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, KindNotification, ID{}, 0, "notifications/initialized"},
		{"null params read as absent", `{"jsonrpc":"2.0","id":1,"method":"ping","params":null}`, KindRequest, IntID(1), 0, "ping"},
		{"result response", `{"jsonrpc":"2.0","id":1,"result":{}}`, KindResponse, IntID(1), 0, ""},
		{"error response", `{"jsonrpc":"2.0","id":"x","error":{"code":-1,"message":"no"}}`, KindResponse, StringID("x"), 0, ""},
		{"leading whitespace", "  \t{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r", KindRequest, IntID(1), 0, "ping"},

		{"invalid JSON", `{"jsonrpc":"2.0","id":1,"method":`, 0, ID{}, CodeParseError, ""},
		{"not JSON at all", `hello`, 0, ID{}, CodeParseError, ""},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, 0, ID{}, CodeInvalidRequest, ""},
		{"broken batch", `[{"jsonrpc":"2.0",`, 0, ID{}, CodeParseError, ""},
		{"scalar", `42`, 0, ID{}, CodeInvalidRequest, ""},
		{"wrong version keeps id", `{"jsonrpc":"1.0","id":5,"method":"ping"}`, KindRequest, IntID(5), CodeInvalidRequest, ""},
		{"missing version", `{"id":5,"method":"ping"}`, KindRequest, IntID(5), CodeInvalidRequest, ""},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, KindRequest, ID{}, CodeInvalidRequest, ""},
		{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, KindRequest, ID{}, CodeInvalidRequest, ""},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, KindRequest, ID{}, CodeInvalidRequest, ""},
		{"id too large", `{"jsonrpc":"2.0","id":99999999999999999999,"method":"ping"}`, KindRequest, ID{}, CodeInvalidRequest, ""},
		{"method not a string", `{"jsonrpc":"2.0","id":2,"method":5}`, KindRequest, IntID(2), CodeInvalidRequest, ""},
		{"empty method", `{"jsonrpc":"2.0","id":2,"method":""}`, KindRequest, IntID(2), CodeInvalidRequest, ""},
		{"array params", `{"jsonrpc":"2.0","id":2,"method":"ping","params":[1]}`, KindRequest, IntID(2), CodeInvalidRequest, "ping"},
		{"request with result", `{"jsonrpc":"2.0","id":2,"method":"ping","result":{}}`, KindRequest, IntID(2), CodeInvalidRequest, ""},
		{"result and error", `{"jsonrpc":"2.0","id":2,"result":{},"error":{"code":1,"message":"x"}}`, KindResponse, IntID(2), CodeInvalidRequest, ""},
		{"nothing", `{"jsonrpc":"2.0"}`, 0, ID{}, CodeInvalidRequest, ""},
		{"bad notification stays a notification", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}`, KindNotification, ID{}, CodeInvalidRequest, "notifications/cancelled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode([]byte(tt.frame))
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatalf("Decode: unexpected error %v", err)
				}
			} else if err == nil || err.Code != tt.wantCode {
				t.Fatalf("Decode error = %v, want code %d", err, tt.wantCode)
			}
			if m.Kind != tt.wantKind {
				t.Errorf("Kind = %v, want %v", m.Kind, tt.wantKind)
			}
			if m.ID != tt.wantID {
				t.Errorf("ID = %v, want %v", m.ID, tt.wantID)
			}
			if m.Method != tt.method {
				t.Errorf("Method = %q, want %q", m.Method, tt.method)
			}
		})
	}
}

func TestDecodeErrorResponseObject(t *testing.T) {
	m, err := Decode([]byte(`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"nope","data":{"x":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Error == nil || m.Error.Code != CodeMethodNotFound || m.Error.Message != "nope" || string(m.Error.Data) != `{"x":1}` {
		t.Fatalf("error object = %+v", m.Error)
	}
}

func TestStringAndIntIDsDiffer(t *testing.T) {
	if StringID("1") == IntID(1) {
		t.Fatal(`"1" and 1 must be different ids`)
	}
	seen := map[ID]bool{StringID("1"): true}
	if seen[IntID(1)] {
		t.Fatal("map lookup conflates string and integer ids")
	}
}

func TestAppendRoundTrip(t *testing.T) {
	ids := []ID{IntID(0), IntID(-42), IntID(1 << 62), StringID(""), StringID("a\"b\\c\n<é>")}
	for _, id := range ids {
		frames := [][]byte{
			AppendResult(nil, id, json.RawMessage(`{"ok":true}`)),
			AppendError(nil, id, NewError(CodeInvalidParams, "bad \"x\"\n").WithData(map[string]int{"n": 1})),
			AppendRequest(nil, id, "tools/call", json.RawMessage(`{"name":"echo"}`)),
		}
		for _, f := range frames {
			if !json.Valid(f) {
				t.Fatalf("invalid JSON: %s", f)
			}
			if bytes.ContainsAny(f, "\n") {
				t.Fatalf("frame contains a newline: %s", f)
			}
			m, err := Decode(f)
			if err != nil {
				t.Fatalf("Decode(%s): %v", f, err)
			}
			if m.ID != id {
				t.Fatalf("id round trip: got %v want %v in %s", m.ID, id, f)
			}
		}
	}
	n := AppendNotification(nil, "notifications/progress", json.RawMessage(`{"progress":1}`))
	m, err := Decode(n)
	if err != nil || m.Kind != KindNotification || m.Method != "notifications/progress" {
		t.Fatalf("notification round trip: %+v %v", m, err)
	}
	noID := AppendError(nil, ID{}, NewError(CodeParseError, "parse error"))
	if strings.Contains(string(noID), `"id"`) {
		t.Fatalf("error without id must omit the member: %s", noID)
	}
}

func TestIDScanner(t *testing.T) {
	tests := []struct {
		frame string
		want  ID
		ok    bool
	}{
		{`{"jsonrpc":"2.0","id":17,"method":"x"}`, IntID(17), true},
		{`{"id" : "abc" ,"method":"x"}`, StringID("abc"), true},
		{`{"params":{"id":99,"x":"\"id\":5"},"id":-4}`, IntID(-4), true},
		{`{"method":"x","params":{"a":["id",{"id":1}]},"id":"q\"r"}`, StringID(`q"r`), true},
		{`{"method":"x","params":{}}`, ID{}, false},
		{`{"idx":3,"method":"x"}`, ID{}, false},
		{`{"id":null}`, ID{}, false},
		{`{"id":"` + strings.Repeat("z", 300) + `"}`, ID{}, false},
	}
	for _, tt := range tests {
		// Feed one byte at a time: the scanner must not depend on chunking.
		var s IDScanner
		for i := 0; i < len(tt.frame); i++ {
			s.Write([]byte{tt.frame[i]})
		}
		id, ok := s.ID()
		if ok != tt.ok || id != tt.want {
			t.Errorf("scan %q = %v, %v; want %v, %v", tt.frame, id, ok, tt.want, tt.ok)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","method":"n","params":{}}`,
		`{"jsonrpc":"2.0","id":"x","result":{}}`,
		`[1]`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		m, err := Decode(frame)
		if err != nil {
			if err.Code != CodeParseError && err.Code != CodeInvalidRequest {
				t.Fatalf("unexpected code %d", err.Code)
			}
			return
		}
		switch m.Kind {
		case KindRequest:
			if !m.ID.IsValid() || m.Method == "" {
				t.Fatalf("request without id or method: %+v", m)
			}
		case KindNotification:
			if m.ID.IsValid() || m.Method == "" {
				t.Fatalf("bad notification: %+v", m)
			}
		case KindResponse:
			if (m.Result == nil) == (m.Error == nil) {
				t.Fatalf("response must have exactly one of result and error: %+v", m)
			}
		default:
			t.Fatalf("decoded message without kind")
		}
		var s IDScanner
		s.Write(frame)
		if id, ok := s.ID(); m.Kind == KindRequest && ok && id != m.ID {
			t.Fatalf("scanner id %v differs from decoded id %v", id, m.ID)
		}
		if s.Kind() != m.Kind {
			t.Fatalf("scanner kind %v differs from decoded kind %v", s.Kind(), m.Kind)
		}
		// An id goes back on the wire as the client can match it.
		if m.ID.IsValid() {
			if again, err := ParseID(m.ID.AppendJSON(nil)); err != nil || again != m.ID {
				t.Fatalf("id %s re-encoded as %s parses as %v, %v", m.ID, m.ID.AppendJSON(nil), again, err)
			}
		}
	})
}

// FuzzIDScanner feeds the scanner a frame in two pieces: where the frame
// is split must not change what it finds.
func FuzzIDScanner(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"id":"a\"b","method":"x","params":{"id":2}}`,
		`{"method":"n","params":{"x":"\\"}}`,
		`{"jsonrpc":"2.0","id":3,"result":{}}`,
		`{"id":1,"id":"two"}`,
		`{"id":-12345678901234567890}`,
	} {
		f.Add([]byte(s), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, frame []byte, at uint16) {
		var whole, split IDScanner
		whole.Write(frame)
		cut := int(at) % (len(frame) + 1)
		split.Write(frame[:cut])
		split.Write(frame[cut:])
		id1, ok1 := whole.ID()
		id2, ok2 := split.ID()
		if id1 != id2 || ok1 != ok2 || whole.Kind() != split.Kind() {
			t.Fatalf("split at %d: %v %v %v, whole: %v %v %v", cut, id2, ok2, split.Kind(), id1, ok1, whole.Kind())
		}
	})
}

// Decode does not copy: a message's raw members are the frame's own bytes
// (its callers hand it buffers they own), so a request is held once.
func TestDecodedMembersAliasTheFrame(t *testing.T) {
	frame := []byte(`{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}`)
	m, err := Decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Params) != `{"a":1}` || &m.Params[0] != &frame[len(frame)-len(`{"a":1}}`)] {
		t.Fatalf("params %s are not the frame's own bytes", m.Params)
	}
}

// A string id that decoding would alter (invalid UTF-8, a lone surrogate
// escape) is echoed as it arrived, and two such ids stay apart; ids that
// decode exactly keep their normal form.
func TestLossyStringIDsEchoAsSent(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		echo string // "" means the same as raw
	}{
		{`"a\ud800"`, ``},
		{`"a\udbff"`, ``},
		{`"\udc00x"`, ``},
		{`"a\ud800\u0041"`, ``},
		{"\"a\xffb\"", ``},
		{`"\ud83d\ude00"`, `"😀"`}, // a proper pair: exact, re-encoded normally
		{`"plain"`, ``},
		{`"tab\\\\u"`, ``}, // an escaped backslash, not an escape
	} {
		m, err := Decode([]byte(`{"jsonrpc":"2.0","id":` + tc.raw + `,"method":"ping"}`))
		if err != nil {
			t.Fatalf("%s: %v", tc.raw, err)
		}
		want := tc.echo
		if want == "" {
			want = tc.raw
		}
		if got := string(m.ID.AppendJSON(nil)); got != want {
			t.Errorf("id %s echoed as %s, want %s", tc.raw, got, want)
		}
	}
	a, _ := ParseID([]byte(`"a\ud800"`))
	b, _ := ParseID([]byte(`"a\udbff"`))
	if a == b {
		t.Error(`"a\ud800" and "a\udbff" are the same id`)
	}
	c, _ := ParseID([]byte(`"a"`))
	d, _ := ParseID([]byte(`"\u0061"`))
	if c != d {
		t.Error(`"a" and "\u0061" are different ids`)
	}
}

// Decode and IDScanner agree on a frame with two "id" members: the last
// counts, as encoding/json has it.
func TestDuplicateIDOneRule(t *testing.T) {
	frame := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","id":"two"}`)
	m, err := Decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	var s IDScanner
	s.Write(frame)
	id, ok := s.ID()
	if !ok || id != m.ID || m.ID != StringID("two") {
		t.Fatalf("Decode read %v, IDScanner %v (%v); want both \"two\"", m.ID, id, ok)
	}
}

// IDScanner tells a request from a notification and a response, as Decode
// does, so that an oversize notification is never answered.
func TestIDScannerKind(t *testing.T) {
	for _, tc := range []struct {
		frame string
		kind  Kind
	}{
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"id":7,"requestId":1}}`, KindNotification},
		{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"method":"x"}}`, KindRequest},
		{`{"method":"tools/call","jsonrpc":"2.0","id":3}`, KindRequest},
		{`{"jsonrpc":"2.0","id":3,"result":{}}`, KindResponse},
		{`{"jsonrpc":"2.0","params":{"method":"x","id":1}}`, 0},
		{`{"jsonrpc":"2.0","methods":"x"}`, 0},
	} {
		var s IDScanner
		s.Write([]byte(tc.frame))
		m, _ := Decode([]byte(tc.frame))
		if s.Kind() != tc.kind || (tc.kind != 0 && m.Kind != tc.kind) {
			t.Errorf("%s: scanner says %v, Decode %v; want %v", tc.frame, s.Kind(), m.Kind, tc.kind)
		}
	}
}

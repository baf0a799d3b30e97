package jsonrpc_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/jsonrpc"
)

// membersByJSON is what encoding/json reads of obj's members, the last of
// a repeated key winning, compacted.
func membersByJSON(t testing.TB, obj []byte) (map[string]string, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil || m == nil {
		return nil, false
	}
	out := map[string]string{}
	for k, v := range m {
		var b bytes.Buffer
		json.Compact(&b, v)
		out[k] = b.String()
	}
	return out, true
}

func membersOf(obj []byte) (map[string]string, error) {
	out := map[string]string{}
	err := jsonrpc.Members(obj, func(k, v []byte) bool {
		var b bytes.Buffer
		json.Compact(&b, v)
		out[string(k)] = b.String()
		return true
	})
	return out, err
}

// Members reads every valid object as encoding/json does, values
// unchanged and not copied, and refuses what is not an object.
func TestMembersAgreeWithEncodingJSON(t *testing.T) {
	for _, obj := range []string{
		`{}`, ` { } `, `{"a":1}`, `{"a":1,"b":"x"}`,
		`{"name":"echo","arguments":{"text":"a \"quoted\" } ] text","n":[1,{"x":[]}]},"_meta":{"k":null}}`,
		`{"esc\u0061ped":true,"a":false}`, `{"a":1,"a":2}`, "{\n\t\"a\" :\r\n -1.5e+3 ,\"b\":\"\\\\\"}",
		`{"s":"\\"}`,
	} {
		want, _ := membersByJSON(t, []byte(obj))
		got, err := membersOf([]byte(obj))
		if err != nil || len(got) != len(want) {
			t.Errorf("%s: %v, %v; want %v", obj, got, err, want)
			continue
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: member %q = %s, want %s", obj, k, got[k], v)
			}
		}
	}
	for _, notObject := range []string{`[]`, `"x"`, `1`, `null`, ``, `{"a"}`, `{"a":1,}`, `{"a":"x`} {
		if _, err := membersOf([]byte(notObject)); err == nil {
			t.Errorf("%q: accepted", notObject)
		}
	}
	obj := []byte(`{"arguments":{"text":"hi"}}`)
	v := jsonrpc.Member(obj, "arguments")
	if string(v) != `{"text":"hi"}` || &v[0] != &obj[len(`{"arguments":`)] {
		t.Errorf("Member = %s, want a subslice of the object", v)
	}
	if jsonrpc.Member(obj, "name") != nil {
		t.Error("Member found an absent key")
	}
}

// For every valid JSON object, Members agrees with encoding/json.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":[{"c":"}"}],"d":"\"\\"}`, `{"a":{"b":{"c":[1,2,3]}},"a":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, obj []byte) {
		want, ok := membersByJSON(t, obj)
		if !ok {
			return // not a valid object: Members' input must be valid
		}
		got, err := membersOf(obj)
		if err != nil {
			t.Fatalf("%q: %v", obj, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %v, want %v", obj, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%q: member %q = %s, want %s", obj, k, got[k], v)
			}
		}
	})
}

// elementsByJSON is what encoding/json reads of arr's elements.
func elementsByJSON(arr []byte) ([]string, bool) {
	var raw []json.RawMessage
	if err := json.Unmarshal(arr, &raw); err != nil || raw == nil {
		return nil, false
	}
	out := make([]string, len(raw))
	for i, v := range raw {
		out[i] = string(v)
	}
	return out, true
}

func elementsOf(arr []byte) ([]string, error) {
	out := []string{}
	err := jsonrpc.Elements(arr, func(v []byte) bool {
		out = append(out, string(v))
		return true
	})
	return out, err
}

// Elements reads every valid array as encoding/json does, each element
// the bytes it was written with, and refuses what is not an array.
func TestElementsAgreeWithEncodingJSON(t *testing.T) {
	for _, arr := range []string{
		`[]`, ` [ ] `, `[1]`, `[1,"x",null,true]`, "[\n {\"type\":\"text\",\"text\":\"a ] , [ \\\" b\"} ,\t[[],{}] ]",
		`["\\",-1.5e+3]`, `[{"a":[1,{"b":"]"}]}]`,
	} {
		want, _ := elementsByJSON([]byte(arr))
		got, err := elementsOf([]byte(arr))
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %q, %v; want %q", arr, got, err, want)
		}
	}
	for _, notArray := range []string{`{}`, `"x"`, `1`, `null`, ``, `[1,]`, `[1 2]`, `["x`, `[1`} {
		if _, err := elementsOf([]byte(notArray)); err == nil {
			t.Errorf("%q: accepted", notArray)
		}
	}
	arr := []byte(`[{"a":1},2]`)
	var first []byte
	jsonrpc.Elements(arr, func(v []byte) bool { first = v; return false })
	if string(first) != `{"a":1}` || &first[0] != &arr[1] {
		t.Errorf("the first element = %s, want a subslice of the array", first)
	}
}

// For every valid JSON array, Elements agrees with encoding/json.
func FuzzElements(f *testing.F) {
	for _, s := range []string{`[]`, `[1,{"a":"]"},["\"\\"]]`, ` [ null , "x" ] `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, arr []byte) {
		want, ok := elementsByJSON(arr)
		if !ok {
			return // not a valid array: Elements' input must be valid
		}
		got, err := elementsOf(arr)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%q: %q, %v; want %q", arr, got, err, want)
		}
	})
}

func TestPlainStringAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range []string{`""`, `"tools/call"`, `"tools/list"`, `"complete"`, `"caf\u00e9"`, `"café"`,
		"\"\xff\"", `"a\"b"`, `"a\\b"`, `"a/b"`, `1`, `null`, `"`, `"unterminated`, "\"a\x01\"",
		`"` + strings.Repeat("x", 100) + `"`, `"日本"`} {
		s, ok := jsonrpc.PlainString([]byte(c))
		if !ok {
			continue // the caller decodes it in full
		}
		var want string
		if err := json.Unmarshal([]byte(c), &want); err != nil || s != want {
			t.Errorf("jsonrpc.PlainString(%q) = %q, encoding/json decodes %q (%v)", c, s, want, err)
		}
	}
	for _, c := range []string{`"tools/call"`, `"complete"`, `"é"`} {
		if _, ok := jsonrpc.PlainString([]byte(c)); !ok {
			t.Errorf("jsonrpc.PlainString(%q) is not ok", c)
		}
	}
	// The table of recent strings hands back equal strings, never a
	// colliding one.
	a, _ := jsonrpc.PlainString([]byte(`"tools/call"`))
	b, _ := jsonrpc.PlainString([]byte(`"tools/list"`))
	c, _ := jsonrpc.PlainString([]byte(`"tools/call"`))
	if a != "tools/call" || b != "tools/list" || c != "tools/call" {
		t.Errorf("got %q %q %q", a, b, c)
	}
}

func FuzzPlainString(f *testing.F) {
	f.Add([]byte(`"tools/call"`))
	f.Add([]byte(`"caf\u00e9"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, ok := jsonrpc.PlainString(b)
		if !ok {
			return
		}
		var want string
		if err := json.Unmarshal(b, &want); err != nil || s != want {
			t.Errorf("jsonrpc.PlainString(%q) = %q, encoding/json decodes %q (%v)", b, s, want, err)
		}
	})
}

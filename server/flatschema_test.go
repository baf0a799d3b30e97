package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// The flat check never calls valid what the validator refuses, and calls
// valid the common calls, so that they skip the validator.
func TestFlatSchemaAgreesWithTheValidator(t *testing.T) {
	schemas := map[string]string{
		"typed":   `{"type":"object","properties":{"text":{"type":"string","description":"what to say"},"n":{"type":"integer"},"x":{"type":"number"},"ok":{"type":"boolean"},"nothing":{"type":"null"}},"required":["text"],"additionalProperties":false}`,
		"open":    `{"type":"object","title":"t","properties":{"a":{"type":"string"}},"required":["a"]}`,
		"true-ap": `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{}}`,
		"two":     `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a","b"]}`,
	}
	args := []string{
		`{"text":"hi"}`, `{"text":""}`, `{"text":"hi","n":3,"x":-1.5e3,"ok":true,"nothing":null}`,
		`{"text":"hi","n":1.0}`, `{"text":"hi","n":1e2}`, `{"text":"hi","n":-0}`, `{"text":"hi","n":12345678901234567890123}`,
		`{"text":1}`, `{"text":null}`, `{"text":["a"]}`, `{"text":{"a":1}}`, `{"text":true}`,
		`{}`, `{"n":1}`, `{"text":"a","text":"b"}`, `{"text":"hi","extra":1}`, `{"te\u0078t":"escaped key"}`,
		`{"text":"hi","ok":"yes"}`, `{"text":"hi","nothing":0}`, `{"text":"hi","x":"1"}`,
		`{"a":"x"}`, `{"a":"x","b":[1,2]}`, `{"a":1}`, `{"b":1}`, `{"a":5,"zz":{"deep":[null]}}`,
		`[]`, `"text"`, `null`, ``,
		`{"text":"hi","x":1e400}`, `{"text":"hi","x":-1e400}`, `{"text":"hi","n":1` + strings.Repeat("0", 400) + `}`,
		`{"a":1e400}`, `{"a":-0.0}`,
		// Not an integer; a property given twice that is not required
		// (a required one is caught by the count already), by its own
		// name and escaped.
		`{"text":"hi","n":1.5}`, `{"text":"hi","n":2E3}`, `{"text":"hi","n":1,"n":"x"}`, `{"text":"hi","n":1,"\u006e":"x"}`,
		// One required property twice must not count as two.
		`{"a":"x","a":"y"}`, `{"a":"x","\u0061":"y"}`, `{"a":"x","b":"y"}`,
	}
	fast := 0
	for name, raw := range schemas {
		var s jsonschema.Schema
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			t.Fatal(err)
		}
		f := flatSchemaOf(&s)
		if f == nil {
			t.Fatalf("%s: not flat", name)
		}
		resolved, err := s.Resolve(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range args {
			if !f.valid([]byte(a)) {
				continue
			}
			fast++
			var v map[string]any
			if err := unmarshalExact([]byte(a), &v); err != nil {
				t.Fatalf("%s: %s judged valid, but it does not decode: %v", name, a, err)
			}
			if err := resolved.Validate(validationValue(v, nil, func(string) bool { return true })); err != nil {
				t.Errorf("%s: %s judged valid; the validator says %v", name, a, err)
			}
		}
	}
	if fast < 10 {
		t.Fatalf("only %d calls judged valid without the validator", fast)
	}
}

// A schema that asks for more than types and presence is left to the
// validator whole.
func TestSchemasBeyondFlatGoToTheValidator(t *testing.T) {
	for _, raw := range []string{
		`{"type":"object","properties":{"a":{"type":"string","minLength":2}}}`,
		`{"type":"object","properties":{"a":{"type":"string","enum":["x"]}}}`,
		`{"type":"object","properties":{"a":{"type":"string","format":"email"}}}`,
		`{"type":"object","properties":{"a":{"type":["string","null"]}}}`,
		`{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}}}`,
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"string"}}}`,
		`{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}}`,
		`{"type":"object","properties":{"a":{"type":"integer"}},"minProperties":1}`,
		`{"type":"object","properties":{"a":{"type":"integer"}},"required":["b"]}`,
		`{"type":"object","patternProperties":{"^x":{"type":"string"}}}`,
		`{"type":"object","x-vendor":true}`,
		`{"properties":{"a":{"type":"string"}}}`,
		`{"type":"object","anyOf":[{"required":["a"]}]}`,
	} {
		var s jsonschema.Schema
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			t.Fatal(err)
		}
		if flatSchemaOf(&s) != nil {
			t.Errorf("%s was taken as flat", raw)
		}
	}
}

// plainStringBytes reads the strings it can without a decoder exactly as
// json.Unmarshal does, and declines every other value.
func TestPlainStringBytes(t *testing.T) {
	for raw, plain := range map[string]bool{
		`"echo"`: true, `"a.b-c_d"`: true, `""`: true, `"with space"`: true,
		`"é"`: false, `"a\"b"`: false, `"a\\b"`: false, `"\u0041"`: false, "\"tab\t\"": false,
		`42`: false, `null`: false, `"unterminated`: false, `"`: false, `{"a":1}`: false,
	} {
		body, ok := plainStringBytes([]byte(raw))
		got := string(body)
		if ok != plain {
			t.Errorf("plainStringBytes(%s) ok = %v, want %v", raw, ok, plain)
		}
		var want string
		if err := json.Unmarshal([]byte(raw), &want); ok && (err != nil || got != want) {
			t.Errorf("plainStringBytes(%s) = %q; json.Unmarshal gives %q, %v", raw, got, want, err)
		}
	}
}

package server

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
	"time"
)

// selfEncoding writes itself as any JSON value it likes.
type selfEncoding struct{ v any }

func (s selfEncoding) MarshalJSON() ([]byte, error) { return json.Marshal(s.v) }

// Inferred schemas must describe what encoding/json writes, or clients
// that validate results against them refuse the results.
func TestInferSchemaDescribesTheEncoding(t *testing.T) {
	type out struct {
		Raw      json.RawMessage                 `json:"raw"`
		Bytes    []byte                          `json:"bytes"`
		Self     selfEncoding                    `json:"self"`
		SelfPtr  *selfEncoding                   `json:"selfPtr"`
		Addr     netip.Addr                      `json:"addr"`
		When     time.Time                       `json:"when"`
		Nested   []struct{ Raw json.RawMessage } `json:"nested"`
		Optional json.RawMessage                 `json:"optional,omitempty"`
	}
	schema, err := inferSchema(reflect.TypeFor[out]())
	if err != nil {
		t.Fatal(err)
	}
	rs, err := schema.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []out{
		{Raw: json.RawMessage(`{"a":[1,2]}`), Bytes: []byte("hi"), Self: selfEncoding{map[string]any{"x": 1}}, SelfPtr: &selfEncoding{[]any{1}},
			Addr: netip.MustParseAddr("127.0.0.1"), When: time.Unix(0, 0), Nested: []struct{ Raw json.RawMessage }{{json.RawMessage(`"s"`)}}},
		{Raw: json.RawMessage(`7`), Self: selfEncoding{"text"}, Optional: json.RawMessage(`null`)},
		{Raw: json.RawMessage(`null`), Self: selfEncoding{nil}},
	} {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var inst any
		json.Unmarshal(data, &inst)
		if err := rs.Validate(inst); err != nil {
			s, _ := json.Marshal(schema)
			t.Errorf("%s does not validate against its inferred schema %s: %v", data, s, err)
		}
	}
}

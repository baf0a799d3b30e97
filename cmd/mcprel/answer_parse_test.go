package main

import (
	"encoding/json"
	"testing"
)

// "nan" and "inf" parse as floats but have no JSON form: a number field
// asks again for them instead of failing the whole answer (and the call)
// when the client encodes it.
func TestParseFieldNumberIsSendable(t *testing.T) {
	for _, line := range []string{"nan", "NaN", "inf", "-Inf", "infinity"} {
		v, problem := parseField(fieldSchema{Type: "number"}, line, nil)
		if problem == "" {
			if _, err := json.Marshal(v); err != nil {
				t.Errorf("number %q accepted as %v, which cannot be sent: %v", line, v, err)
			}
		}
	}
	if v, problem := parseField(fieldSchema{Type: "number"}, "2.5", nil); problem != "" || v != 2.5 {
		t.Errorf("number 2.5 = %v (%s)", v, problem)
	}
}

// A choice whose value is what the person typed is that value, even when
// the text is also the number of another choice; a number that is no
// choice's value still picks by position.
func TestParseFieldChoiceByValueFirst(t *testing.T) {
	values := []string{"2", "1"}
	if v, problem := parseField(fieldSchema{Type: "string", Enum: values}, "1", values); problem != "" || v != "1" {
		t.Errorf("choice %q of %q = %v (%s), want %q", "1", values, v, problem, "1")
	}
	if v, problem := parseField(fieldSchema{Type: "array"}, "1, 2", values); problem != "" || len(v.([]string)) != 2 || v.([]string)[0] != "1" {
		t.Errorf("choices %q of %q = %v (%s), want [1 2]", "1, 2", values, v, problem)
	}
	values = []string{"red", "green"}
	if v, problem := parseField(fieldSchema{Type: "string", Enum: values}, "2", values); problem != "" || v != "green" {
		t.Errorf("choice 2 of %q = %v (%s), want green", values, v, problem)
	}
}

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

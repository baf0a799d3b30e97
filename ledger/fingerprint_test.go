package ledger_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/mcprel/mcprel/ledger"
)

// fingerprintJSON decodes args as the server does (numbers exact) and
// fingerprints them.
func fingerprintJSON(args string, fields []string, skip string) (ledger.Fingerprint, error) {
	var m map[string]any
	if args != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(args)))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			return ledger.Fingerprint{}, err
		}
	}
	return ledger.FingerprintOf(m, fields, skip)
}

func TestFingerprintIsCanonical(t *testing.T) {
	fp := func(args string, fields ...string) ledger.Fingerprint {
		t.Helper()
		f, err := fingerprintJSON(args, fields, "idempotencyKey")
		if err != nil {
			t.Fatalf("FingerprintOf(%s): %v", args, err)
		}
		return f
	}
	same := [][2]string{
		{`{"a":1,"b":{"y":2,"x":[1,2]}}`, `{ "b": {"x": [1, 2], "y": 2.0}, "a": 1e0 }`},
		{`{"sku":"A","idempotencyKey":"k1"}`, `{"sku":"A","idempotencyKey":"k2"}`},
		{`{}`, ``},
		{`{"s":"\u00e9"}`, `{"s":"é"}`},
		{`{"n":12.50}`, `{"n":1250e-2}`},
		{`{"n":0}`, `{"n":-0.0}`},
		{`{"n":100}`, `{"n":1E+2}`},
	}
	for _, c := range same {
		if fp(c[0]) != fp(c[1]) {
			t.Errorf("%s and %s should fingerprint the same", c[0], c[1])
		}
	}
	differ := [][2]string{
		{`{"quantity":1}`, `{"quantity":2}`},
		{`{"x":null}`, `{}`},
		{`{"x":[1,2]}`, `{"x":[2,1]}`},
		{`{"x":"1"}`, `{"x":1}`},
		{`{"n":12345678901234567890123}`, `{"n":12345678901234567890124}`},
		{`{"n":0.1000000000000000000001}`, `{"n":0.1}`},
		{`{"n":-1}`, `{"n":1}`},
		{`{"n":10}`, `{"n":1}`},
	}
	for _, c := range differ {
		if fp(c[0]) == fp(c[1]) {
			t.Errorf("%s and %s should fingerprint differently", c[0], c[1])
		}
	}
	// Only the listed fields count.
	if fp(`{"sku":"A","quantity":1,"note":"x"}`, "sku", "quantity") != fp(`{"sku":"A","quantity":1,"note":"y"}`, "sku", "quantity") {
		t.Error("a field outside the list changed the fingerprint")
	}
	if fp(`{"sku":"A","quantity":1}`, "sku", "quantity") == fp(`{"sku":"A","quantity":3}`, "sku", "quantity") {
		t.Error("a listed field did not change the fingerprint")
	}
}

// A number whose exact text was lost (decoded as float64) cannot be
// fingerprinted: two different amounts could collide.
func TestFingerprintRefusesInexactNumbers(t *testing.T) {
	if _, err := ledger.FingerprintOf(map[string]any{"cents": 12.5}, nil, ""); err == nil {
		t.Error("a float64 argument was fingerprinted")
	}
	if _, err := ledger.FingerprintOf(map[string]any{"cents": json.Number("12.5")}, nil, ""); err != nil {
		t.Errorf("an exact number was refused: %v", err)
	}
}

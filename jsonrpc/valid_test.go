package jsonrpc

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// validCases are inputs on which a hand-written JSON grammar is easily
// wrong: Valid must answer each as encoding/json's Valid does.
var validCases = []string{
	``, ` `, `{}`, ` {} `, `{`, `}`, `[]`, `[`, `[,]`, `[1,]`, `[1 2]`, `{"a"}`, `{"a":}`,
	`{"a":1,}`, `{"a":1 "b":2}`, `{,"a":1}`, `{"a" : 1 , "b" : [ ] }`, `{1:2}`, `{'a':1}`,
	`"`, `""`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\u00e9"`, `"\u00E9"`, `"\u00g9"`, `"\u00e"`,
	`"\x"`, `"\'"`, "\"a\x01b\"", "\"a\x7fb\"", "\"\xff\xfe\"", "\"\xc3\xa9\"", "\"tab\tin\"",
	`0`, `-0`, `-`, `01`, `-01`, `1.`, `1.0`, `.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `1.5e3`,
	`-1.5E-3`, `+1`, `1.e3`, `123456789012345678901234567890`, `1 `, ` 1`, `1 1`, `0x1`, `NaN`,
	`Infinity`, `true`, `false`, `null`, `tru`, `nul`, `nulll`, `True`, `[true,false,null]`,
	`[truefalse]`, `{"a":true}x`, "{}\n", "\t[\r\n]\n", `{"a":{"b":{"c":[1,{"d":null}]}}}`,
	`{"a":"b"}{}`, `[1]]`, `[[]`, `{"a":1}}`, "\x00", "{\"a\":1}\x00", `[-]`, `[1-2]`, `[1.2.3]`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`,
}

func TestValidAgreesWithEncodingJSON(t *testing.T) {
	cases := append([]string(nil), validCases...)
	for _, d := range []int{9999, 10000, 10001} {
		cases = append(cases, strings.Repeat("[", d)+strings.Repeat("]", d))
		cases = append(cases, strings.Repeat(`{"a":`, d)+"1"+strings.Repeat("}", d))
	}
	for _, c := range cases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%.60q) = %v, encoding/json says %v", c, got, want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	frame := []byte(`{"jsonrpc":"2.0","id":12345,"result":{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"mcprel","version":"0.1.0"}},"resultType":"complete","content":[{"type":"text","text":"call 12345"}]}}`)
	b.Run("jsonrpc", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for b.Loop() {
			Valid(frame)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for b.Loop() {
			json.Valid(frame)
		}
	})
}

// ValidMembers must say what Valid says of any bytes, and hand fn what
// Members hands it for valid ones.
func checkValidMembers(t *testing.T, b []byte) {
	type kv struct{ k, v string }
	var got, want []kv
	err := ValidMembers(b, func(k, v []byte) bool { got = append(got, kv{string(k), string(v)}); return true })
	if !json.Valid(b) {
		if err != ErrInvalidJSON {
			t.Errorf("ValidMembers(%q) = %v for invalid JSON", b, err)
		}
		return
	}
	werr := Members(b, func(k, v []byte) bool { want = append(want, kv{string(k), string(v)}); return true })
	if (err == nil) != (werr == nil) || err == ErrInvalidJSON {
		t.Errorf("ValidMembers(%q) = %v, Members says %v", b, err, werr)
		return
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ValidMembers(%q) gave %q, Members %q", b, got, want)
	}
}

func TestValidMembers(t *testing.T) {
	for _, c := range append(validCases, `{"a\u0062":1, "a":[1,{"x":"}"}] ,"b" : null }`, "{\"\xff\":1}", `{"a":1}  `, `{"a":1} x`) {
		checkValidMembers(t, []byte(c))
	}
	n := 0
	if err := ValidMembers([]byte(`{"a":1,"b":2,"c":x}`), func(k, v []byte) bool { n++; return false }); err != ErrInvalidJSON || n != 1 {
		t.Errorf("stopped early: %v after %d members; want the rest checked", err, n)
	}
}

func FuzzValidMembers(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Fuzz(checkValidMembers)
}

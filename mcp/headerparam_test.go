package mcp_test

import (
	"encoding/json"
	"testing"

	"github.com/mcprel/mcprel/mcp"
)

// Values that are safe header text go as they are; the others go as
// base64 in the =?base64?…?= form, and every one reads back as it was.
func TestHeaderValueEncoding(t *testing.T) {
	cases := []struct{ in, want string }{
		{"us-west1", "us-west1"},
		{"us west 1", "us west 1"},
		{"", ""},
		{"42", "42"},
		{"Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="},
		{" padded ", "=?base64?IHBhZGRlZCA=?="},
		{" lead", "=?base64?IGxlYWQ=?="},
		{"trail ", "=?base64?dHJhaWwg?="},
		{"line1\nline2", "=?base64?bGluZTEKbGluZTI=?="},
		{"\tindented", "=?base64?CWluZGVudGVk?="},
		{"a\x7fb", "=?base64?YX9i?="},
		{"=?base64?QQ==?=", "=?base64?PT9iYXNlNjQ/UVE9PT89?="},
	}
	for _, tc := range cases {
		got := mcp.EncodeHeaderValue(tc.in)
		if got != tc.want {
			t.Errorf("EncodeHeaderValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if back, ok := mcp.DecodeHeaderValue(got); !ok || back != tc.in {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v, want %q", got, back, ok, tc.in)
		}
	}
}

// ParamHeaders mirrors exactly the annotated arguments that hold a value.
func TestParamHeaders(t *testing.T) {
	params, err := mcp.FindHeaderParams(json.RawMessage(`{"type":"object","properties":{
		"r":{"type":"string","x-mcp-header":"Region"},"p":{"type":"integer","x-mcp-header":"Priority"},
		"v":{"type":"boolean","x-mcp-header":"Verbose"},"q":{"type":"string"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range mcp.ParamHeaders(params, json.RawMessage(`{"r":"é","p":42,"v":null,"q":"x"}`)) {
		got[h[0]] = h[1]
	}
	want := map[string]string{"Mcp-Param-Region": "=?base64?w6k=?=", "Mcp-Param-Priority": "42"}
	if len(got) != len(want) || got["Mcp-Param-Region"] != want["Mcp-Param-Region"] || got["Mcp-Param-Priority"] != want["Mcp-Param-Priority"] {
		t.Fatalf("ParamHeaders = %v, want %v", got, want)
	}
}

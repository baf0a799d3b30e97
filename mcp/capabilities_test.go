package mcp_test

import (
	"encoding/json"
	"testing"

	"github.com/mcprel/mcprel/mcp"
)

// Capability members the type has no field for are written beside the
// others (a known member wins over one of the same name) and kept when
// an object is decoded.
func TestServerCapabilitiesKeepOtherMembers(t *testing.T) {
	c := mcp.ServerCapabilities{
		Tools: &mcp.ListChangedCapability{ListChanged: true},
		Other: map[string]json.RawMessage{"tasks": json.RawMessage(`{"list":{}}`), "tools": json.RawMessage(`"shadow"`)},
	}
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"tools":{"listChanged":true},"tasks":{"list":{}}}`; string(data) != want {
		t.Fatalf("encoded %s, want %s", data, want)
	}
	if data, _ := json.Marshal(mcp.ServerCapabilities{Other: map[string]json.RawMessage{"tasks": json.RawMessage(`{}`)}}); string(data) != `{"tasks":{}}` {
		t.Fatalf("only other members: %s", data)
	}
	var back mcp.ServerCapabilities
	if err := json.Unmarshal([]byte(`{"tools":{},"tasks":{"cancel":{}},"extensions":{"x/y":{}}}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.Tools == nil || string(back.Other["tasks"]) != `{"cancel":{}}` || len(back.Other) != 1 || back.Extensions["x/y"] == nil {
		t.Fatalf("decoded %+v", back)
	}
}

package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// A request's params carry the _meta that encoding the map of its
// members would give, byte for byte — members sorted by name, the
// client's own winning over the caller's of the same name — whatever
// mix of the client's members, a progress token, declared capabilities
// and the caller's members it has, in either era.
func TestParamsMetaIsTheSortedObjectOfItsMembers(t *testing.T) {
	extras := []map[string]any{
		nil,
		{},
		{"a": 1},
		{"zz": json.RawMessage(` { "id" : "x" } `)},
		{mcp.MetaProtocolVersion: "1999-01-01", mcp.MetaClientInfo: "me"},
		{mcp.MetaProgressToken: "mine"},
		{"io.a": "x", "io.modelcontextprotocol/clientInfo2": true, "q": []int{1, 2}, "progressTokenZ": nil, "p": "é\"\n"},
		{"k0": 0, "k1": 1, "k2": 2, "k3": 3, "k4": 4, "k5": 5, "k6": 6, "k7": 7, "k8": 8, "k9": 9, "progress": 10, "x": 11},
	}
	for _, era := range []mcp.Era{mcp.Legacy, mcp.Modern} {
		c := &Client{era: era, version: "2026-07-28", capsJSON: json.RawMessage(`{"roots":{}}`),
			taskCapsJSON: json.RawMessage(`{"extensions":{"io.modelcontextprotocol/tasks":{}},"roots":{}}`), infoJSON: json.RawMessage(`{"name":"t","version":"1"}`)}
		if era == mcp.Legacy {
			c.version = "2025-11-25"
		}
		for _, token := range []string{"", "p7", "p123456"} {
			for _, declare := range []encoded{nil, encoded(`{"elicitation":{"form":{}}}`)} {
				for _, asksTask := range []bool{false, true} {
					for i, extra := range extras {
						for _, params := range []map[string]any{nil, {"name": "echo"}, {"name": "echo", "arguments": json.RawMessage(`{"text":"hi"}`)}} {
							name := fmt.Sprintf("%v/token=%q/declare=%s/task=%v/extra%d/params%d", era, token, declare, asksTask, i, len(params))
							var d encoded
							if era == mcp.Modern {
								d = declare
							}
							got, err := c.params(params, token, extra, asksTask, d)
							if err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							want, err := json.Marshal(c.meta(nil, token, extra, asksTask, d))
							if err != nil {
								t.Fatal(err)
							}
							var meta []byte
							rest := map[string]json.RawMessage{}
							jsonrpc.Members(got, func(k, v []byte) bool {
								if string(k) == "_meta" {
									meta = v
								} else {
									rest[string(k)] = v
								}
								return true
							})
							if !bytes.Equal(meta, want) {
								t.Fatalf("%s: _meta\n%s\nwant\n%s", name, meta, want)
							}
							if !json.Valid(got) {
								t.Fatalf("%s: params %s are not JSON", name, got)
							}
							wantRest := map[string]json.RawMessage{}
							for k, v := range params {
								b, _ := json.Marshal(v)
								wantRest[k] = b
							}
							if !reflect.DeepEqual(rest, wantRest) {
								t.Fatalf("%s: params %s, want the members %v", name, got, wantRest)
							}
						}
					}
				}
			}
		}
	}
}

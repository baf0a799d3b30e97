package stdio_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/transport/stdio"
)

// syncID is the id of the request that follows each fuzz input; an input
// that uses it is skipped.
const syncID = "mcprel-fuzz-sync"

// FuzzSession sends arbitrary lines to a stdio connection: whatever they
// are, every line the server writes is one JSON message, and a valid
// request sent after them is answered, once.
func FuzzSession(f *testing.F) {
	for _, row := range badInputs {
		if len(row.frame) <= 2*maxMessage {
			f.Add(row.frame)
		}
	}
	f.Add(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	srv := mcptest.NewServer(f, nil)
	addEcho(f, srv)
	f.Fuzz(func(t *testing.T, input string) {
		if strings.Contains(input, syncID) {
			t.Skip("the input uses the sync id")
		}
		c := mcptest.Stdio(t, srv, &stdio.Options{MaxMessageBytes: maxMessage})
		c.Send(input)
		c.SendJSON(map[string]any{"jsonrpc": "2.0", "id": syncID, "method": mcp.MethodToolsCall,
			"params": mcptest.ModernParams(map[string]any{"name": "echo", "arguments": map[string]any{"text": "still here"}})})
		for {
			f := c.Next()
			if !json.Valid([]byte(f.Raw)) {
				t.Fatalf("the server wrote a line that is not JSON: %q", f.Raw)
			}
			if f.IsResponseTo(jsonrpc.StringID(syncID)) {
				if !strings.Contains(f.Raw, "still here") {
					t.Fatalf("the request after the input got %s", f.Raw)
				}
				break
			}
		}
		c.CloseInput()
		for f := range c.Frames() {
			if f.IsResponseTo(jsonrpc.StringID(syncID)) {
				t.Fatalf("the request after the input was answered twice: %s", f.Raw)
			}
		}
	})
}

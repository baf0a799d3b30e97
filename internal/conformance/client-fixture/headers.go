package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// callFromContext makes the tool calls the scenario names in
// MCP_CONFORMANCE_CONTEXT ({"toolCalls": [{"name", "arguments"}]}), with
// their arguments exactly as given: http-custom-headers judges the
// Mcp-Param-* headers the client mirrors from them (SEP-2243).
func callFromContext(ctx context.Context, c *client.Client) error {
	var sc struct {
		ToolCalls []struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"toolCalls"`
	}
	if err := json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &sc); err != nil {
		return fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %w", err)
	}
	for _, call := range sc.ToolCalls {
		if _, err := c.CallTool(ctx, call.Name, call.Arguments, nil); err != nil {
			return fmt.Errorf("%s: %w", call.Name, err)
		}
	}
	return nil
}

// callEveryTool calls each tool the client kept from tools/list, as a
// generic client would: http-invalid-tool-headers judges that the tools
// whose x-mcp-header annotations break the rules are never among them,
// and that the valid one is.
func callEveryTool(ctx context.Context, c *client.Client, tools []mcp.Tool) error {
	for _, t := range tools {
		if _, err := c.CallTool(ctx, t.Name, map[string]any{}, nil); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	return nil
}

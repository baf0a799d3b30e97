package main

import (
	"context"
	"fmt"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// echoSchema sends the focal tool's inputSchema, as the client received
// it, back through the echo tool: json-schema-2020-12-preservation judges
// that no keyword was lost or altered on the way through the client.
func echoSchema(ctx context.Context, c *client.Client, tools []mcp.Tool) (*mcp.CallToolResult, error) {
	for _, t := range tools {
		if t.Name == "json_schema_2020_12_tool" {
			return c.CallTool(ctx, "json_schema_echo", map[string]any{"schema": t.InputSchema}, nil)
		}
	}
	return nil, fmt.Errorf("tools/list has no json_schema_2020_12_tool")
}

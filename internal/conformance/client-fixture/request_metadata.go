package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// requestMetadata prepares the request-metadata scenario (SEP-2575): a
// client that serves roots, sampling and elicitation declares them, and
// every request's _meta carries them with the protocol version and the
// client's info. The scenario's server refuses the first request's
// version; Dial's negotiation asks again in one it lists. The calls are
// the default ones: list the tools, call the first if there is one.
func requestMetadata(opts *client.Options) {
	opts.Capabilities.Roots = json.RawMessage(`{}`)
	opts.Capabilities.Sampling = json.RawMessage(`{}`)
	opts.Capabilities.Elicitation = json.RawMessage(`{}`)
	opts.OnRequest = answerPlainly
}

// answerPlainly serves the three capabilities requestMetadata declares
// the way a client with nothing to offer does: no roots, elicitations
// declined, sampling refused.
func answerPlainly(ctx context.Context, method string, params json.RawMessage) (any, error) {
	switch method {
	case "roots/list":
		return map[string]any{"roots": []any{}}, nil
	case "elicitation/create":
		return map[string]any{"action": "decline"}, nil
	case "sampling/createMessage":
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "this client has no model to sample")
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "this client does not serve %s", method)
}

// standardHeaders makes each request the http-standard-headers scenario
// (SEP-2243) judges the Mcp-Method and Mcp-Name headers of: tools,
// resources and prompts, listed and each first one used.
func standardHeaders(ctx context.Context, c *client.Client, tools []mcp.Tool) error {
	if len(tools) > 0 {
		if _, err := c.CallTool(ctx, tools[0].Name, map[string]any{}, nil); err != nil {
			return err
		}
	}
	raw, err := c.Request(ctx, mcp.MethodResourcesList, "", nil, nil)
	if err != nil {
		return err
	}
	var resources mcp.ListResourcesResult
	if err := json.Unmarshal(raw, &resources); err != nil {
		return fmt.Errorf("resources/list answered %s: %w", raw, err)
	}
	if len(resources.Resources) > 0 {
		uri := resources.Resources[0].URI
		if _, err := c.Request(ctx, mcp.MethodResourcesRead, uri, map[string]any{"uri": uri}, nil); err != nil {
			return err
		}
	}
	if raw, err = c.Request(ctx, mcp.MethodPromptsList, "", nil, nil); err != nil {
		return err
	}
	var prompts mcp.ListPromptsResult
	if err := json.Unmarshal(raw, &prompts); err != nil {
		return fmt.Errorf("prompts/list answered %s: %w", raw, err)
	}
	if len(prompts.Prompts) > 0 {
		name := prompts.Prompts[0].Name
		if _, err := c.Request(ctx, mcp.MethodPromptsGet, name, map[string]any{"name": name}, nil); err != nil {
			return err
		}
	}
	return nil
}

// Command client-fixture is mcprel's client as the conformance suite's
// client scenarios run it: `client-fixture URL`, with the scenario's name
// in MCP_CONFORMANCE_SCENARIO. Each scenario is a few calls of package
// client; the suite's own server judges what reached it. The auth/*
// scenarios sign in with package client/oauth as the Authorizer (see
// auth.go).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: client-fixture URL (with MCP_CONFORMANCE_SCENARIO set)")
		os.Exit(2)
	}
	if err := run(os.Getenv("MCP_CONFORMANCE_SCENARIO"), os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "client-fixture:", err)
		os.Exit(1)
	}
}

func run(scenario, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts := &client.Options{Info: mcp.Implementation{Name: "mcprel-conformance-client", Version: "1.0.0"}}
	var requestState requestStateScenario
	switch scenario {
	case "elicitation-sep1034-client-defaults":
		opts.Capabilities.Elicitation = json.RawMessage(`{}`)
		opts.OnRequest = acceptWithDefaults
	case "sep-2322-client-request-state":
		requestState.options(opts)
	case "request-metadata":
		requestMetadata(opts)
	}
	if strings.HasPrefix(scenario, "auth/") {
		a, err := authorizer(scenario, url)
		if err != nil {
			return err
		}
		opts.Authorizer = a
	}
	c, err := client.DialHTTP(ctx, url, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	tools, err := c.ListTools(ctx)
	if err != nil {
		return err
	}
	var res *mcp.CallToolResult
	switch scenario {
	case "initialize":
		return nil
	case "http-standard-headers":
		return standardHeaders(ctx, c, tools)
	case "tools_call":
		res, err = c.CallTool(ctx, "add_numbers", map[string]any{"a": 5, "b": 3}, nil)
	case "elicitation-sep1034-client-defaults":
		res, err = c.CallTool(ctx, "test_client_elicitation_defaults", map[string]any{}, nil)
	case "sse-retry":
		res, err = c.CallTool(ctx, "test_reconnection", map[string]any{}, nil)
	case "sep-2322-client-request-state":
		return requestState.run(ctx, c)
	case "http-custom-headers":
		return callFromContext(ctx, c)
	case "http-invalid-tool-headers":
		return callEveryTool(ctx, c, tools)
	case "json-schema-2020-12-preservation":
		res, err = echoSchema(ctx, c, tools)
	case "json-schema-ref-no-deref":
		// Listing is the whole action: the client must not fetch the
		// network $ref the listed schema holds.
		return nil
	default:
		// An unknown scenario: call the first tool, as a generic client would.
		if len(tools) == 0 {
			return nil
		}
		res, err = c.CallTool(ctx, tools[0].Name, map[string]any{}, nil)
	}
	if err != nil {
		return err
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return nil
}

// acceptWithDefaults answers elicitation/create by accepting, with each
// field of the requested schema that has a default set to it (SEP-1034).
func acceptWithDefaults(ctx context.Context, method string, params json.RawMessage) (any, error) {
	if method != "elicitation/create" {
		return nil, fmt.Errorf("this client does not serve %s", method)
	}
	var p struct {
		RequestedSchema struct {
			Properties map[string]struct {
				Default any `json:"default"`
			} `json:"properties"`
		} `json:"requestedSchema"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, err
	}
	content := map[string]any{}
	for name, prop := range p.RequestedSchema.Properties {
		if prop.Default != nil {
			content[name] = prop.Default
		}
	}
	return map[string]any{"action": "accept", "content": content}, nil
}

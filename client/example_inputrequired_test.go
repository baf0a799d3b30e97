package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// One handler answers what a server asks of the client, in either era: a
// 2025 server's elicitation/create request, or a 2026-07-28 server's
// input_required result, after which CallTool sends the call again with
// the answer and returns only the final result.
func ExampleOptions_OnRequest() {
	ctx := context.Background()
	c, err := client.DialHTTP(ctx, "http://127.0.0.1:8080/mcp", &client.Options{
		Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)},
		OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			if method != mcp.MethodElicit {
				return nil, fmt.Errorf("this program does not serve %s", method)
			}
			var p mcp.ElicitParams
			if err := json.Unmarshal(params, &p); err != nil {
				return nil, err
			}
			fmt.Println("the server asks:", p.Message)
			return mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirmed": true}}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	res, err := c.CallTool(ctx, "deploy", map[string]any{"service": "web"}, nil)
	var ie *client.InputError
	switch {
	case errors.As(err, &ie):
		fmt.Println("not answered:", ie.Request, ie.Err)
	case err != nil:
		fmt.Println("failed:", err)
	default:
		fmt.Println("deployed:", !res.IsError)
	}
}

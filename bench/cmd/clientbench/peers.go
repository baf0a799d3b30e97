package main

import (
	"context"
	"fmt"
	"os/exec"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The other Go SDKs' clients, driven the same way as package client: one
// connection, one echo call per caller invocation, the result checked.

func goSDKCaller(server []string, useHTTP bool) (caller, func(), error) {
	var t gosdk.Transport
	var kill func()
	if useHTTP {
		url, k, err := startHTTP(server)
		if err != nil {
			return nil, nil, err
		}
		t, kill = &gosdk.StreamableClientTransport{Endpoint: url}, k
	} else {
		t, kill = &gosdk.CommandTransport{Command: exec.Command(server[0], server[1:]...)}, func() {}
	}
	cs, err := gosdk.NewClient(&gosdk.Implementation{Name: "clientbench", Version: "1"}, nil).Connect(context.Background(), t, nil)
	if err != nil {
		kill()
		return nil, nil, err
	}
	call := func(i int) error {
		res, err := cs.CallTool(context.Background(), &gosdk.CallToolParams{Name: "echo", Arguments: map[string]any{"text": fmt.Sprint("call ", i)}})
		if err != nil {
			return err
		}
		if res.IsError || len(res.Content) != 1 {
			return fmt.Errorf("echo answered %d blocks (isError %v)", len(res.Content), res.IsError)
		}
		return nil
	}
	return call, func() { cs.Close(); kill() }, nil
}

func mcpGoCaller(server []string, useHTTP bool) (caller, func(), error) {
	var c *mcpgoclient.Client
	kill := func() {}
	var err error
	if useHTTP {
		var url string
		if url, kill, err = startHTTP(server); err != nil {
			return nil, nil, err
		}
		if c, err = mcpgoclient.NewStreamableHttpClient(url); err == nil {
			err = c.Start(context.Background())
		}
	} else {
		c, err = mcpgoclient.NewStdioMCPClient(server[0], nil, server[1:]...)
	}
	if err != nil {
		kill()
		return nil, nil, err
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcpgo.Implementation{Name: "clientbench", Version: "1"}
	if _, err := c.Initialize(context.Background(), init); err != nil {
		c.Close()
		kill()
		return nil, nil, err
	}
	call := func(i int) error {
		req := mcpgo.CallToolRequest{}
		req.Params.Name = "echo"
		req.Params.Arguments = map[string]any{"text": fmt.Sprint("call ", i)}
		res, err := c.CallTool(context.Background(), req)
		if err != nil {
			return err
		}
		if res.IsError || len(res.Content) != 1 {
			return fmt.Errorf("echo answered %d blocks (isError %v)", len(res.Content), res.IsError)
		}
		return nil
	}
	return call, func() { c.Close(); kill() }, nil
}

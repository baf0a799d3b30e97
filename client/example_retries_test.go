package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// A program's retries: one planner per server, whose table says what each
// tool is. A keyed reservation is made again after a lost answer with the
// same key; a payment whose answer was lost ends in a ReconcileError that
// says what to look up first.
func ExampleClient_CallToolWithRetries() {
	ctx := context.Background()
	c, err := client.DialHTTP(ctx, "http://127.0.0.1:8080/mcp", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	planner := retry.NewPlanner(retry.Options{Table: retry.Table{Tools: map[string]retry.Rule{
		"reserve_inventory": {Class: mcp.RetryConditional, Lookup: "lookup_operation"},
		"charge_account":    {Class: mcp.RetryUnsafe, Lookup: "list_charges"},
	}}})
	res, err := c.CallToolWithRetries(ctx, "reserve_inventory",
		map[string]any{"sku": "w1", "quantity": 3, mcp.ArgIdempotencyKey: "order-1234"},
		&client.CallOptions{Max: time.Minute}, &client.Retries{Planner: planner})
	var rec *retry.ReconcileError
	switch {
	case errors.As(err, &rec):
		fmt.Println("reconcile first:", rec.Instruction)
	case err != nil:
		fmt.Println("failed:", err)
	case res.IsError:
		fmt.Println("the tool refused:", res.Content)
	default:
		fmt.Println("reserved")
	}
}

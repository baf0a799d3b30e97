// Command hello is the smallest mcprel server: one typed tool over stdio.
// The README shows this file; a test keeps the two identical.
package main

import (
	"context"
	"log"
	"os"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

type greetArgs struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

func main() {
	srv, err := server.New(mcp.Implementation{Name: "hello", Version: "1.0.0"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	// The input schema is inferred from greetArgs; arguments are validated
	// against it before the handler runs.
	// Retry is what the server tells clients they may do after a call is
	// lost: a greeting has no effects, so it may simply be made again.
	greet := server.Tool{
		Name:        "greet",
		Description: "Greets someone. Read-only; safe to retry.",
		Policy:      server.Policy{Retry: mcp.RetrySafe},
	}
	err = server.AddTypedTool(srv, greet,
		func(ctx context.Context, req *server.CallRequest, in greetArgs) (string, error) {
			return "Hello, " + in.Name + "!", nil
		})
	if err != nil {
		log.Fatal(err)
	}
	// Serve until stdin closes; ctx would cancel every call in flight.
	if err := stdio.NewConn(srv, os.Stdin, os.Stdout, nil).Serve(context.Background()); err != nil {
		log.Fatal(err)
	}
}

package retry_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// Seeded jitter makes the pauses of one client reproducible: the same
// seed gives the same pauses on every run, each inside its doubling bound.
func ExampleSeededJitter() {
	b := retry.Backoff{Jitter: retry.SeededJitter("client-42")}
	for n := range 7 {
		fmt.Printf("retry %d: %-7v (bound %v)\n", n, b.Delay(n, 0).Round(time.Millisecond), b.Bound(n))
	}
	// Output:
	// retry 0: 110ms   (bound 250ms)
	// retry 1: 280ms   (bound 500ms)
	// retry 2: 675ms   (bound 1s)
	// retry 3: 1.323s  (bound 2s)
	// retry 4: 1.516s  (bound 4s)
	// retry 5: 6.387s  (bound 8s)
	// retry 6: 1.213s  (bound 8s)
}

// A client's retry loop: the table says what each tool is, the planner
// says whether and when to try again.
func ExamplePlanner() {
	planner := retry.NewPlanner(retry.Options{
		Table: retry.Table{
			Default: retry.Rule{Class: mcp.RetryUnsafe},
			Tools: map[string]retry.Rule{
				"get_order":   {Class: mcp.RetrySafe},
				"place_order": {Class: mcp.RetryConditional, Lookup: "lookup_operation"},
				"send_email":  {Class: mcp.RetryUnsafe, Lookup: "list_sent_emails"},
			},
		},
		Backoff: retry.Backoff{Jitter: retry.SeededJitter("example")},
	})
	now := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	overloaded := &jsonrpc.Error{Code: mcp.CodeOverloaded, Message: "overloaded",
		Data: []byte(`{"code":"overloaded","message":"queue full","retryable":true,"retryAfterMs":1200}`)}

	// The server refused a keyed order: same key, same arguments, after
	// the server's 1.2 s plus jitter.
	order := planner.Start(retry.Call{Tool: "place_order", HasIdempotencyKey: true, Deadline: now.Add(30 * time.Second)})
	d := order.Next(retry.Classify(overloaded), now)
	fmt.Println("place_order:", d.Retry, d.SameKey, d.Delay.Round(time.Millisecond))

	// The connection broke after an email went out: reconcile, never resend.
	email := planner.Start(retry.Call{Tool: "send_email"})
	d = email.Next(retry.Verdict{Kind: retry.Lost}, now)
	var re *retry.ReconcileError
	if errors.As(d.Err, &re) {
		fmt.Println("send_email:", re.Instruction)
	}
	// Output:
	// place_order: true true 1.336s
	// send_email: the call of tool "send_email" may have taken effect (the connection broke after the request was sent, before its answer) and is not retried because nothing deduplicates its effects; before calling it again, call the tool "list_sent_emails" to find out whether it did
}

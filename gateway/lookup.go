package gateway

import (
	"context"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/ledger"
)

// addLookup serves lookup_operation (idempotency.AddLookup) from l beside
// the upstreams' tools, which hide any upstream tool of that name: to
// what the ledger recorded of a keyed call it adds the key the upstream
// was sent (UpstreamKey), in the one shape "mcprel serve" answers in.
func (g *Gateway) addLookup(l *ledger.Ledger) error {
	return idempotency.AddLookup(g.srv, l, idempotency.Lookup{
		Description: "The gateway's record of a keyed call of a tool it forwards (give the tool as this gateway lists it): " +
			"whether it was answered (and the stored answer), is still running, or has an unknown outcome (it may have " +
			"taken effect upstream and its answer was lost; upstreamKey is the key the upstream was sent, to look for " +
			"there). Read-only; safe to retry. Never repeat an operation under a new key to find out.",
		Describe: func(_ context.Context, tenant, tool, key string, op *idempotency.Operation) error {
			op.UpstreamKey = g.upstreamKeyOf(tenant, tool, key)
			return nil
		},
	})
}

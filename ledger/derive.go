package ledger

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
)

// DerivedKey is the key a caller's idempotency key becomes where it leaves
// mcprel for a service that deduplicates by it (a provider behind the
// outbox, an upstream MCP server behind the gateway). A key belongs to its
// scope — a tenant and a tool — and the service sees one namespace: two
// tenants who both chose "order-1" must not meet there, nor be answered
// with each other's result. So the service is given a hash of every part
// of the scope and the key, never the key itself: the same parts always
// give the same key, so every retry is deduplicated, and any part that
// differs gives another.
//
// It is "mcprel-" and 32 lower-case base32 characters: the first 160 bits
// of SHA-256 over each part, written as its length in bytes, ":" and the
// part, one after another. Anyone holding the parts can compute it again
// (to find the operation at the service by hand).
func DerivedKey(parts ...string) string {
	h := sha256.New()
	for _, part := range parts {
		fmt.Fprintf(h, "%d:%s", len(part), part)
	}
	return "mcprel-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(h.Sum(nil)[:20]))
}

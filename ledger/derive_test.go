package ledger_test

import (
	"testing"

	"github.com/mcprel/mcprel/ledger"
)

// A derived key is what a service outside keeps to deduplicate by: if the
// derivation changed between two versions, a retry after an upgrade
// would be a new operation there. So the value is pinned (it is the key
// the outbox has sent since it was written), and parts are kept apart by
// their lengths: moving a separator between parts gives another key.
func TestDerivedKeyIsStable(t *testing.T) {
	if got, want := ledger.DerivedKey("acme", "send_payout", "k1", "payouts"), "mcprel-62s7bkzm6ibjyvosuyealwbcvyeko4ep"; got != want {
		t.Fatalf("DerivedKey = %s, want %s (the outbox's delivery key of this operation)", got, want)
	}
	if ledger.DerivedKey("a:b", "c") == ledger.DerivedKey("a", "b:c") || ledger.DerivedKey("ab", "c") == ledger.DerivedKey("a", "bc") {
		t.Fatal("two different sets of parts give one key")
	}
	if ledger.DerivedKey("alice", "send", "order-1") == ledger.DerivedKey("bob", "send", "order-1") {
		t.Fatal("two tenants' one key gives one derived key")
	}
}

package ledger_test

import (
	"testing"

	"github.com/mcprel/mcprel/ledger"
)

// The resolve command names the database unless its URL may hold a
// password, and quotes what a shell would split.
func TestResolveCommand(t *testing.T) {
	for _, tc := range []struct{ db, tenant, tool, key, want string }{
		{"", "", "send_email", "m-1", "mcprel ledger resolve --tool send_email --key m-1"},
		{"/var/lib/mcprel/gw.db", "acme", "send_email", "m 2", "mcprel ledger resolve --db /var/lib/mcprel/gw.db --tenant acme --tool send_email --key 'm 2'"},
		{"postgres://u:pw@db/x", "", "t", "k", "mcprel ledger resolve --tool t --key k"},
		{"postgres://db/x?password=pw", "", "t", "k", "mcprel ledger resolve --tool t --key k"},
		{"/tmp/it's.db", "o'brien", "t", "<k>", `mcprel ledger resolve --db '/tmp/it'\''s.db' --tenant 'o'\''brien' --tool t --key '<k>'`},
	} {
		if got := ledger.ResolveCommand(tc.db, tc.tenant, tc.tool, tc.key); got != tc.want {
			t.Errorf("ResolveCommand(%q, %q, %q, %q) = %s, want %s", tc.db, tc.tenant, tc.tool, tc.key, got, tc.want)
		}
	}
}

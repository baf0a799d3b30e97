package ledger

import (
	"net/url"
	"strings"
)

// ResolveCommand is the "mcprel ledger resolve" command line that closes
// the unknown outcome of tenant, tool and key, before one of --result
// FILE, --failed MESSAGE or --forget is added to it: what "mcprel ledger
// list" prints for each unknown outcome and the status page shows. db,
// when not empty, is named by --db, unless it is a URL that holds a
// password, which must stay in MCPREL_DB. Every argument is quoted for a
// POSIX shell when it needs to be.
func ResolveCommand(db, tenant, tool, key string) string {
	cmd := "mcprel ledger resolve"
	if db != "" && !HasPassword(db) {
		cmd += " --db " + ShellQuote(db)
	}
	if tenant != "" {
		cmd += " --tenant " + ShellQuote(tenant)
	}
	return cmd + " --tool " + ShellQuote(tool) + " --key " + ShellQuote(key)
}

// ShellQuote quotes s for a POSIX shell when it holds more than letters,
// digits and -._/:@=,+%.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/:@=,+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// HasPassword reports whether dsn is a URL that may hold a password: one
// with a password or a password parameter, and any URL without user
// information or that does not parse, which is not risked in a command
// line. A file path holds none.
func HasPassword(dsn string) bool {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return strings.Contains(dsn, "://") // unparsable: do not risk printing it
	}
	_, ok := u.User.Password()
	return ok || u.Query().Get("password") != ""
}

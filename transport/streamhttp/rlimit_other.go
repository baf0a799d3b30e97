//go:build !unix

package streamhttp

// openFileLimit is unknown here.
func openFileLimit() int { return 0 }

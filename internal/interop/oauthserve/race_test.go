//go:build race

package oauthserve_test

// Under `go test -race`, mcprel is built with -race too, so that these
// exchanges race-check it; atexit_sleep_ms=0 drops the race runtime's
// pause at exit.
func init() {
	buildFlags = append(buildFlags, "-race")
	runEnv = append(runEnv, "GORACE=atexit_sleep_ms=0 halt_on_error=1")
}

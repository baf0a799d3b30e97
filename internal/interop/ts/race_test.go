//go:build race

package ts_test

// Under `go test -race` the server is built with -race too, so the interop
// run also race-checks it (a report lands in stderr.log, which the test
// scans). atexit_sleep_ms=0 drops the race runtime's 1s pause at exit, which
// would otherwise look like a server slow to exit on EOF; the HTTP test
// starts its server with nodeEnv too.
func init() {
	buildFlags = append(buildFlags, "-race")
	nodeEnv = append(nodeEnv, "GORACE=atexit_sleep_ms=0")
}

package host

import (
	"net/http"
	"time"
)

// SetStepHook has f told of each shutdown step before it runs, on the
// goroutine that runs it: the tests record the order, and check what
// holds between two steps.
func SetStepHook(rt *Runtime, f func(step string)) { rt.stepHook = f }

// CloseListener closes the endpoint's listener under the HTTP server, as
// a failing network would: the server's Serve fails.
func CloseListener(rt *Runtime) error { return rt.ln.Close() }

// SetUnknownRefresh makes the gauge of unknown outcomes counted every d
// until the test ends.
func SetUnknownRefresh(t interface{ Cleanup(func()) }, d time.Duration) {
	old := unknownRefresh
	unknownRefresh = d
	t.Cleanup(func() { unknownRefresh = old })
}

// StatusPage is the runtime's status page, nil without metrics.
func StatusPage(rt *Runtime) interface {
	HTML() http.Handler
	JSON() http.Handler
} {
	return rt.status
}

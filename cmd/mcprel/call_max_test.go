package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// slowListingProxy forwards to target, holding every tools/list for
// delay (or until the client gives up on it) before it forwards it. The
// first tools/list's arrival is sent on listed.
func slowListingProxy(t *testing.T, target string, delay time.Duration, listed chan<- time.Time) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"tools/list"`)) {
			select {
			case listed <- time.Now():
			default:
			}
			select {
			case <-time.After(delay): // the scripted slowness, not a synchronisation
			case <-r.Context().Done():
				return
			}
		}
		resp := forwardTo(w, r, target, body)
		if resp == nil {
			return
		}
		defer resp.Body.Close()
		copyHead(w, resp)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// --max is one clock for listing the tools and the call: a server that
// lists slowly leaves the call only what is left, so the command ends
// within --max of its listing's start. The slack (cleanup) covers closing
// the connection and the process's exit — over 2026-07-28 HTTP the call
// is cancelled by closing its stream, at once; starting the process and
// connecting come before the clock and are not measured.
func TestCallMaxBoundsListingAndCall(t *testing.T) {
	const cleanup = 500 * time.Millisecond
	target := unsafeSlowServer(t) // tool "wait" answers only when cancelled
	for _, tc := range []struct {
		name       string
		max, delay time.Duration
		want       string
	}{
		// The listing takes two thirds of --max; the call is cut at --max.
		{"slow listing", 3 * time.Second, 2 * time.Second, "max deadline (3s) fired"},
		// The listing never ends: the call is never sent.
		{"endless listing", time.Second, time.Hour, "the request was never sent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listed := make(chan time.Time, 1)
			url := slowListingProxy(t, target, tc.delay, listed)
			out, errs, code := mcprelCall(t, "--url", url, "--max", tc.max.String(), "wait")
			ended := time.Now()
			if code != exitMax || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, want %d; want %q in\n%s\n%s", code, exitMax, tc.want, out, errs)
			}
			if took := ended.Sub(<-listed); took > tc.max+cleanup {
				t.Fatalf("mcprel call --max %v took %v from its listing's start; want at most %v (--max and %v to clean up)", tc.max, took, tc.max+cleanup, cleanup)
			}
		})
	}
}

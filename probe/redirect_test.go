package probe_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcprel/mcprel/probe"
)

// A redirect carries a request's body and headers — its bearer token —
// to another address. The probe follows none: a 307 is reported as a
// redirect, naming where it pointed, and the address it pointed to is
// never sent anything.
func TestProbeFollowsNoRedirect(t *testing.T) {
	var reached atomic.Int64
	var token atomic.Value
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		token.Store(r.Header.Get("Authorization"))
		http.Error(w, "not here", http.StatusNotFound)
	}))
	t.Cleanup(elsewhere.Close)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/mcp", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)

	_, err := probe.Run(context.Background(), &probe.Options{
		Target: probe.Target{URL: redirecting.URL + "/mcp", Header: http.Header{"Authorization": {"Bearer probe-secret"}}},
		Timing: fastTiming,
	})
	var ue *probe.UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("a server that only redirects: %v, want an UnreachableError", err)
	}
	t.Log(err)
	if n := reached.Load(); n != 0 {
		t.Fatalf("the redirect's target got %d requests (Authorization %q): the probe followed a redirect", n, token.Load())
	}
	if !strings.Contains(err.Error(), "307") || !strings.Contains(err.Error(), elsewhere.URL+"/mcp") {
		t.Fatalf("the error does not say it was a 307 redirect and where to: %v", err)
	}
}

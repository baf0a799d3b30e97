package streamhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/auth"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// A guarded handler costs the same on every request: requests refused
// for their token must not wrap it again. (Wrapped once per request, the
// stack under it grew with every rejected request until a scrape died of
// a stack overflow.) The handler's depth on the stack is measured before
// and after a run of rejected requests, some of them concurrent.
func TestGuardWrapsOnce(t *testing.T) {
	h, err := streamhttp.NewHandler(mcptest.NewServer(t, nil), &streamhttp.HandlerOptions{AuthToken: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	depth := 0
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pcs := make([]uintptr, 4096)
		mu.Lock()
		depth = runtime.Callers(0, pcs)
		mu.Unlock()
	})
	guarded := h.Guard(inner)
	get := func(token string) int {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		guarded.ServeHTTP(w, req)
		return w.Code
	}
	if code := get("s3cret"); code != http.StatusOK {
		t.Fatalf("with the token: %d", code)
	}
	before := depth
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 250 {
				if code := get("wrong"); code != http.StatusUnauthorized {
					t.Errorf("a wrong token: %d, want 401", code)
					return
				}
			}
		})
	}
	wg.Wait()
	if code := get("s3cret"); code != http.StatusOK {
		t.Fatalf("with the token, after 1000 refusals: %d", code)
	}
	if depth != before {
		t.Fatalf("the guarded handler ran %d frames deep after 1000 refused requests, %d before: it is wrapped again per request", depth, before)
	}
}

// Guard requires what the endpoint requires: any of its tenants' tokens,
// never an empty one, nothing but a bearer token; and with an
// Authenticator of the handler's own, that one.
func TestGuardRequiresTheEndpointsCredentials(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for _, tc := range []struct {
		tokens []string
		header string
		want   int
	}{
		{[]string{"a", "b"}, "Bearer b", http.StatusOK},
		{[]string{"a", "b"}, "bearer a", http.StatusOK},
		{[]string{"a", "b"}, "Bearer c", http.StatusUnauthorized},
		{[]string{"a"}, "Basic a", http.StatusUnauthorized},
		{[]string{""}, "Bearer ", http.StatusUnauthorized},
		{nil, "Bearer x", http.StatusOK}, // the endpoint requires nothing
	} {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil)
		req.Header.Set("Authorization", tc.header)
		w := httptest.NewRecorder()
		tenants := map[string]string{}
		for i, tok := range tc.tokens {
			tenants[tok] = fmt.Sprint("t", i)
		}
		h, err := streamhttp.NewHandler(mcptest.NewServer(t, nil), &streamhttp.HandlerOptions{Tokens: tenants})
		if err != nil {
			t.Fatalf("tokens %q: %v", tc.tokens, err)
		}
		h.Guard(ok).ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("tokens %q, Authorization %q: %d, want %d", tc.tokens, tc.header, w.Code, tc.want)
		}
		if w.Code == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") != `Bearer realm="mcp"` {
			t.Errorf("a 401 without the endpoint's challenge: %q", w.Header().Get("WWW-Authenticate"))
		}
	}
	// An Authenticator of the handler's own guards what Guard wraps too:
	// a handler beside the endpoint is never easier to read than it.
	only := auth.AuthenticatorFunc(func(r *http.Request) (auth.Principal, error) {
		if r.Header.Get("Authorization") == "Bearer zed" {
			return auth.Principal{Tenant: "zed"}, nil
		}
		return auth.Principal{}, auth.ErrNoCredentials
	})
	h, err := streamhttp.NewHandler(mcptest.NewServer(t, nil), &streamhttp.HandlerOptions{Authenticator: only})
	if err != nil {
		t.Fatal(err)
	}
	for header, want := range map[string]int{"Bearer zed": http.StatusOK, "Bearer x": http.StatusUnauthorized, "": http.StatusUnauthorized} {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil)
		req.Header.Set("Authorization", header)
		w := httptest.NewRecorder()
		h.Guard(ok).ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("an Authenticator's handler, Authorization %q: %d, want %d", header, w.Code, want)
		}
	}
}

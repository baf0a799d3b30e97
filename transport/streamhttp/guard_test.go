package streamhttp_test

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// A guarded handler costs the same on every request: requests refused
// for their token must not wrap it again. (Wrapped once per request, the
// stack under it grew with every rejected request until a scrape died of
// a stack overflow.) The handler's depth on the stack is measured before
// and after a run of rejected requests, some of them concurrent.
func TestGuardWrapsOnce(t *testing.T) {
	h, err := streamhttp.NewHandler(mcptest.NewServer(t, nil), nil)
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
	guarded := h.Guard(inner, "s3cret")
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

// RequireBearer accepts any of its tokens, and never an empty one: a
// request with an empty bearer token is refused even when the list holds
// an empty string by mistake.
func TestRequireBearerTokens(t *testing.T) {
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
		{nil, "Bearer x", http.StatusUnauthorized},
	} {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil)
		req.Header.Set("Authorization", tc.header)
		w := httptest.NewRecorder()
		streamhttp.RequireBearer(ok, tc.tokens...).ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("tokens %q, Authorization %q: %d, want %d", tc.tokens, tc.header, w.Code, tc.want)
		}
		if w.Code == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") != `Bearer realm="mcp"` {
			t.Errorf("a 401 without the endpoint's challenge: %q", w.Header().Get("WWW-Authenticate"))
		}
	}
}

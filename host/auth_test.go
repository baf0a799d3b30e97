package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/auth"
	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// fakeAuth is an Authenticator of the test's own: the bearer token
// "let-zed-in" is the tenant zed, anything else is refused. It records
// every URL it was asked about, so that the test sees which listeners
// and paths it guarded.
type fakeAuth struct {
	mu   sync.Mutex
	seen map[string]int
}

func (f *fakeAuth) Authenticate(r *http.Request) (auth.Principal, error) {
	f.mu.Lock()
	f.seen[r.Host+r.URL.Path]++
	f.mu.Unlock()
	if tok, ok := auth.Bearer(r); !ok || tok != "let-zed-in" {
		return auth.Principal{}, errors.New("not zed")
	}
	return auth.Principal{Tenant: "zed"}, nil
}

func (f *fakeAuth) count(url string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[strings.TrimPrefix(url, "http://")]
}

// An Authenticator installed through host guards every handler the
// runtime serves: the endpoint (and its tenant reaches the tool), the
// metrics path beside it, the metrics' own listener and a handler
// mounted through Options.Handlers, which reads the caller with
// auth.FromContext. Each refuses a request without credentials with 401
// and the challenge, and serves it with them.
func TestAuthenticatorOnEveryListener(t *testing.T) {
	fake := &fakeAuth{seen: map[string]int{}}
	opts := options(t, storetest.SQLite(t), &steps{})
	opts.Addr = "127.0.0.1:0"
	opts.HTTP.Authenticator = fake
	opts.Metrics.Path = "/metrics"
	opts.Metrics.Addr = "127.0.0.1:0"
	opts.Handlers = map[string]http.Handler{"/whoami": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := auth.FromContext(r.Context())
		if !ok {
			http.Error(w, "no principal", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, p.Tenant)
	})}
	rt, err := host.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	err = rt.Server().AddTool(server.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: req.Tenant}}}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, rt)
	defer stop()

	base := strings.TrimSuffix(rt.Endpoint(), host.DefaultPath)
	urls := []string{base + "/metrics", rt.MetricsURL(), base + "/whoami"}
	for _, u := range urls {
		resp := fetch(t, u, "")
		if resp.code != http.StatusUnauthorized || resp.challenge != auth.Challenge {
			t.Errorf("%s without credentials: %d %q, want 401 with the challenge", u, resp.code, resp.challenge)
		}
		if resp := fetch(t, u, "let-zed-in"); resp.code != http.StatusOK {
			t.Errorf("%s with zed's token: %d, want 200", u, resp.code)
		}
		if n := fake.count(u); n != 2 {
			t.Errorf("the authenticator saw %s %d times, want 2", u, n)
		}
	}
	if resp := fetch(t, base+"/whoami", "let-zed-in"); resp.body != "zed" {
		t.Errorf("the mounted handler's principal: %q, want zed", resp.body)
	}
	if code := post(t, rt.Endpoint(), ""); code != http.StatusUnauthorized {
		t.Errorf("the endpoint without credentials: %d, want 401", code)
	}
	c, err := client.DialHTTP(ctx, rt.Endpoint(), &client.Options{Header: http.Header{"Authorization": {"Bearer let-zed-in"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.CallTool(ctx, "whoami", map[string]any{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, res); got != "zed" {
		t.Errorf("the tool's tenant: %q, want zed", got)
	}
}

// A mounted handler sits behind the endpoint's Host check too.
func TestHandlersBehindTheHostCheck(t *testing.T) {
	opts := options(t, storetest.SQLite(t), &steps{})
	opts.Addr = "127.0.0.1:0"
	opts.Handlers = map[string]http.Handler{"/extra": http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	rt, err := host.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	defer func() {
		cancel()
		<-ran
	}()
	u := strings.TrimSuffix(rt.Endpoint(), host.DefaultPath) + "/extra"
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), `host "evil.example" is not allowed`) {
		t.Fatalf("a foreign Host on a mounted handler: %d %q, want 403", resp.StatusCode, b)
	}
	if resp := fetch(t, u, ""); resp.code != http.StatusOK {
		t.Fatalf("the mounted handler on loopback: %d, want 200", resp.code)
	}
}

// running runs rt until stop, which reports the error Run returns.
func running(t *testing.T, rt *host.Runtime) (ctx context.Context, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	return ctx, func() {
		cancel()
		if err := <-ran; err != nil {
			t.Error(err)
		}
	}
}

type fetched struct {
	code      int
	challenge string
	body      string
	// challengeAll is every WWW-Authenticate header, joined.
	challengeAll string
}

// fetch GETs url with the given bearer token ("" for none).
func fetch(t *testing.T, url, bearer string) fetched {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fetched{code: resp.StatusCode, challenge: resp.Header.Get("WWW-Authenticate"), body: string(b)}
}

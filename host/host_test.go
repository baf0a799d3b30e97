package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/auth/oauth"
	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"go.opentelemetry.io/otel/trace/noop"
)

const token = "s3cret"

// steps records the shutdown steps, and anything the test adds between
// them, in order.
type steps struct {
	mu  sync.Mutex
	got []string
}

func (s *steps) add(step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, step)
}

func (s *steps) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// options are a runtime's options for the test: quiet, with a tracer whose
// flush is recorded as the last step.
func options(t *testing.T, dsn string, rec *steps) *host.Options {
	return &host.Options{
		Implementation: mcp.Implementation{Name: "host-test", Version: "1"},
		Server:         server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		DB:             dsn,
		TracerProvider: noop.NewTracerProvider(),
		FlushTraces:    func(context.Context) error { rec.add("flushed"); return nil },
		// Long: the test releases the held call itself, well within it.
		ShutdownGrace: time.Minute,
	}
}

// text returns the text of a result's first content.
func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res.IsError || len(res.Content) == 0 {
		t.Fatalf("result %+v, want text", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T, want text", res.Content[0])
	}
	return tc.Text
}

// post sends a ping to the endpoint with the given bearer token ("" for
// none) and returns the status.
func post(t *testing.T, endpoint, bearer string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":"probe","method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// storeOpen reports whether the runtime's store still answers, through
// the ledger: an unknown key is ErrNotFound while it is open.
func storeOpen(rt *host.Runtime) bool {
	_, err := rt.Ledger().Lookup(context.Background(), "", "echo", "no-such-key")
	return errors.Is(err, ledger.ErrNotFound)
}

// TestRuntimeOverHTTP assembles a runtime on each store, serves a tool
// over Streamable HTTP behind a token, and stops it: the endpoint stops
// taking requests, the call in flight finishes within the grace, then the
// listener, the tasks, the metrics, the reaper, the store and the traces
// stop, in that order, with the store open until its step.
func TestRuntimeOverHTTP(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		rec := &steps{}
		opts := options(t, dsn, rec)
		opts.Addr = "127.0.0.1:0"
		opts.HTTP.AuthToken = token
		opts.Metrics.Path = "/metrics"
		rt, err := host.New(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		endpoint := rt.Endpoint()
		if !strings.HasPrefix(endpoint, "http://127.0.0.1:") || !strings.HasSuffix(endpoint, host.DefaultPath) {
			t.Fatalf("Endpoint() = %q, want http://127.0.0.1:PORT/mcp", endpoint)
		}

		srv := rt.Server()
		echo := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			if err := json.Unmarshal(req.Arguments, &in); err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(in.Text)}}, nil
		}
		entered, release := make(chan struct{}), make(chan struct{})
		hold := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			close(entered)
			<-release
			rec.add("held call returned")
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("held")}}, nil
		}
		schema := json.RawMessage(`{"type":"object"}`)
		if err := srv.AddTool(server.Tool{Name: "echo", InputSchema: schema}, echo); err != nil {
			t.Fatal(err)
		}
		if err := srv.AddTool(server.Tool{Name: "hold", InputSchema: schema}, hold); err != nil {
			t.Fatal(err)
		}

		drainBegun := make(chan struct{})
		host.SetStepHook(rt, func(step string) {
			rec.add(step)
			switch step {
			case "drain":
				close(drainBegun)
			case "close-transport":
				// Drained, the listener still open: requests are refused.
				if code := post(t, endpoint, token); code != http.StatusServiceUnavailable {
					t.Errorf("a request after the drain: %d, want 503", code)
				}
			case "store":
				if !storeOpen(rt) {
					t.Error("the store closed before its step")
				}
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran := make(chan error, 1)
		go func() { ran <- rt.Run(ctx) }()

		if code := post(t, endpoint, ""); code != http.StatusUnauthorized {
			t.Fatalf("a request without the token: %d, want 401", code)
		}
		metricsURL := strings.TrimSuffix(endpoint, host.DefaultPath) + "/metrics"
		if code := fetch(t, metricsURL, "").code; code != http.StatusUnauthorized {
			t.Fatalf("metrics without the token: %d, want 401 (they need the endpoint's token)", code)
		}
		c, err := client.DialHTTP(ctx, endpoint, &client.Options{Header: http.Header{"Authorization": {"Bearer " + token}}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		res, err := c.CallTool(ctx, "echo", map[string]any{"text": "hi"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := text(t, res); got != "hi" {
			t.Fatalf("echo: %q, want hi", got)
		}
		if code := fetch(t, metricsURL, token).code; code != http.StatusOK {
			t.Fatalf("metrics with the token: %d, want 200", code)
		}

		held := make(chan error, 1)
		go func() {
			res, err := c.CallTool(context.Background(), "hold", map[string]any{}, nil)
			if err == nil && text(t, res) != "held" {
				err = errors.New("hold: wrong result")
			}
			held <- err
		}()
		<-entered
		cancel()
		<-drainBegun
		// The server stops taking requests while the call it holds runs:
		// probe until a request is refused (the refusal follows the step's
		// start at once; each probe is a real request, nothing sleeps).
		for i := 0; post(t, endpoint, token) != http.StatusServiceUnavailable; i++ {
			if i == 10000 {
				t.Fatal("the draining server still takes requests")
			}
		}
		rec.add("refused")
		close(release)
		if err := <-held; err != nil {
			t.Fatalf("the call in flight at the shutdown: %v, want its result within the grace", err)
		}
		if err := <-ran; err != nil {
			t.Fatalf("Run: %v", err)
		}

		want := []string{"drain", "refused", "held call returned", "close-transport", "upstreams", "tasks", "outbox", "metrics", "reaper", "store", "traces", "flushed"}
		if got := rec.list(); !slices.Equal(got, want) {
			t.Errorf("shutdown:\n got %q\nwant %q", got, want)
		}
		if storeOpen(rt) {
			t.Error("the store is still open after Run")
		}
		if conn, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(endpoint, "http://"), host.DefaultPath)); err == nil {
			conn.Close()
			t.Error("the listener still accepts connections after Run")
		}
		if err := rt.Run(context.Background()); err == nil {
			t.Error("a second Run succeeded")
		}
	})
}

// TestHTTPFailureStillDrains: when the HTTP server fails under Run (its
// listener gone), the calls it was serving end within the grace before
// the rest of the shutdown closes the store under them, and Run returns
// the failure.
func TestHTTPFailureStillDrains(t *testing.T) {
	rec := &steps{}
	opts := options(t, storetest.SQLite(t), rec)
	opts.Addr = "127.0.0.1:0"
	rt, err := host.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	entered, release, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	defer let()
	hold := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		defer close(returned)
		close(entered)
		<-release
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("held")}}, nil
	}
	if err := rt.Server().AddTool(server.Tool{Name: "hold", InputSchema: json.RawMessage(`{"type":"object"}`)}, hold); err != nil {
		t.Fatal(err)
	}
	host.SetStepHook(rt, func(step string) {
		rec.add(step)
		switch step {
		case "drain":
			let() // the call finishes within the grace
		case "store":
			select {
			case <-returned:
			default:
				t.Error("the store closes under a call still running")
				let()
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	c, err := client.DialHTTP(ctx, rt.Endpoint(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go c.CallTool(context.Background(), "hold", map[string]any{}, nil)
	<-entered
	if err := host.CloseListener(rt); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err == nil {
		t.Error("Run returned nil after the HTTP server failed")
	}
	want := []string{"drain", "close-transport", "upstreams", "tasks", "outbox", "metrics", "reaper", "store", "traces", "flushed"}
	if got := rec.list(); !slices.Equal(got, want) {
		t.Errorf("shutdown:\n got %q\nwant %q", got, want)
	}
}

// TestRuntimeOverStdio: over stdio, the end of Run's context drains the
// server and ends the connection; a closed stdin ends it without a drain.
// Either way the rest of the shutdown follows in order.
func TestRuntimeOverStdio(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(cancel context.CancelFunc, stdin io.Closer)
		want []string
	}{
		{"context ends", func(cancel context.CancelFunc, _ io.Closer) { cancel() },
			[]string{"drain", "close-transport", "upstreams", "tasks", "outbox", "metrics", "reaper", "store", "traces", "flushed"}},
		{"stdin closes", func(_ context.CancelFunc, stdin io.Closer) { stdin.Close() },
			[]string{"upstreams", "tasks", "outbox", "metrics", "reaper", "store", "traces", "flushed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &steps{}
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			opts := options(t, storetest.SQLite(t), rec)
			opts.Stdin, opts.Stdout = inR, outW
			rt, err := host.New(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			if rt.Endpoint() != "" {
				t.Errorf("Endpoint() = %q over stdio, want none", rt.Endpoint())
			}
			err = rt.Server().AddTool(server.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
				func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("hi")}}, nil
				})
			if err != nil {
				t.Fatal(err)
			}
			host.SetStepHook(rt, rec.add)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- rt.Run(ctx); outW.Close() }()

			c, err := client.Connect(ctx, outR, inW, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.CallTool(ctx, "echo", map[string]any{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := text(t, res); got != "hi" {
				t.Fatalf("echo: %q", got)
			}
			tc.stop(cancel, inW)
			if err := <-ran; err != nil {
				t.Fatalf("Run: %v", err)
			}
			c.Close()
			if got := rec.list(); !slices.Equal(got, tc.want) {
				t.Errorf("shutdown:\n got %q\nwant %q", got, tc.want)
			}
			if storeOpen(rt) {
				t.Error("the store is still open after Run")
			}
		})
	}
}

// TestCloseWithoutRun: a runtime that never runs (its caller failed to
// register a tool) is released by Close: the listeners and the store
// close, the traces flush, and Run is refused afterwards.
func TestCloseWithoutRun(t *testing.T) {
	rec := &steps{}
	opts := options(t, storetest.SQLite(t), rec)
	opts.Addr = "127.0.0.1:0"
	opts.Metrics.Addr = "127.0.0.1:0"
	rt, err := host.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	rt.Close()
	rt.Close()
	if got, want := rec.list(), []string{"flushed"}; !slices.Equal(got, want) {
		t.Errorf("Close twice: %q, want %q", got, want)
	}
	if storeOpen(rt) {
		t.Error("the store is still open after Close")
	}
	for _, u := range []string{rt.Endpoint(), rt.MetricsURL()} {
		addr := strings.SplitN(strings.TrimPrefix(u, "http://"), "/", 2)[0]
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after Close", u)
		}
	}
	if err := rt.Run(context.Background()); err == nil {
		t.Error("Run after Close succeeded")
	}
}

// TestListenError: an address already taken is a *ListenError naming the
// option, and what New opened before it is released (the traces flush).
func TestListenError(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		option string
		set    func(o *host.Options)
	}{
		{"Addr", func(o *host.Options) { o.Addr = taken.Addr().String() }},
		{"Metrics.Addr", func(o *host.Options) { o.Metrics.Addr = taken.Addr().String() }},
	} {
		rec := &steps{}
		opts := options(t, storetest.SQLite(t), rec)
		tc.set(opts)
		_, err := host.New(context.Background(), opts)
		var le *host.ListenError
		if !errors.As(err, &le) || le.Option != tc.option {
			t.Errorf("%s taken: %v, want a *host.ListenError for %s", tc.option, err, tc.option)
		}
		if got := rec.list(); !slices.Equal(got, []string{"flushed"}) {
			t.Errorf("%s taken: %q, want the traces flushed", tc.option, got)
		}
	}
}

// TestOptionsChecked: options New cannot use are refused before anything
// opens, with the field named.
func TestOptionsChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(o *host.Options)
		want string
	}{
		{"no name", func(o *host.Options) { o.Implementation.Name = "" }, "Options.Implementation.Name is required"},
		{"no db", func(o *host.Options) { o.DB = "" }, "Options.DB is required"},
		{"db scheme", func(o *host.Options) { o.DB = "mysql://root@localhost/x" }, "Options.DB: "},
		{"negative grace", func(o *host.Options) { o.ShutdownGrace = -time.Second }, "Options.ShutdownGrace must not be negative"},
		{"path over stdio", func(o *host.Options) { o.Path = "/x" }, "Options.Path applies to HTTP only"},
		{"metrics path over stdio", func(o *host.Options) { o.Metrics.Path = "/metrics" }, "Options.Metrics.Path needs HTTP"},
		{"addr", func(o *host.Options) { o.Addr = "localhost" }, "Options.Addr wants HOST:PORT"},
		{"path", func(o *host.Options) { o.Addr, o.Path = "127.0.0.1:0", "mcp" }, `Options.Path must be a URL path starting with "/"`},
		{"origin", func(o *host.Options) { o.Addr, o.HTTP.AllowedOrigins = "127.0.0.1:0", []string{"example.com"} }, "Options.HTTP.AllowedOrigins wants scheme://host[:port]"},
		{"empty token", func(o *host.Options) { o.HTTP.Tokens = map[string]string{"": "alice"} }, `tenant "alice" has an empty token`},
		{"token twice", func(o *host.Options) { o.HTTP.AuthToken, o.HTTP.Tokens = "t", map[string]string{"t": "alice"} }, "also Options.HTTP.AuthToken"},
		{"metrics path", func(o *host.Options) { o.Addr, o.Metrics.Path = "127.0.0.1:0", "/mcp" }, "Options.Metrics.Path must start with / and differ from Options.Path"},
		{"metrics token and open", func(o *host.Options) { o.Metrics.Addr, o.Metrics.Token, o.Metrics.Open = "127.0.0.1:0", "m", true }, "choose one of Token and Open"},
		{"metrics tenants", func(o *host.Options) {
			o.Metrics.Addr, o.Metrics.Tenants, o.HTTP.Tokens = "127.0.0.1:0", true, map[string]string{"t": "alice"}
		}, "set Options.Metrics.Token"},
		{"metrics tenants under OAuth", func(o *host.Options) {
			o.Addr, o.Metrics.Path, o.Metrics.Tenants = "127.0.0.1:0", "/metrics", true
			o.OAuth = &oauth.Config{Issuers: []string{"https://as.example.com"}}
		}, "set Options.Metrics.Token"},
	} {
		rec := &steps{}
		opts := options(t, storetest.SQLite(t), rec)
		tc.set(opts)
		_, err := host.New(context.Background(), opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "host: ") {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if _, err := host.New(context.Background(), nil); err == nil {
		t.Error("New with nil options succeeded")
	}
}

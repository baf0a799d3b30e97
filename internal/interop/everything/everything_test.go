package everything_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/interop/everything"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// The client's HTTP+SSE transport against the reference server's sse
// mode, which the client's authors did not write: the handshake, a
// listing, a call, a call with progress, and a call cancelled mid-way
// while the connection goes on serving. A recording proxy in front of the
// server shows what the client POSTed: the cancellation names the
// cancelled call's id, and every POST carries the caller's header.
func TestDialSSE(t *testing.T) {
	target := everything.Start(t, everything.SSE)
	proxied, posts := record(t, target)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := client.DialSSE(ctx, proxied, &client.Options{Header: http.Header{"Authorization": {"Bearer interop"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v := c.ProtocolVersion(); c.Era() != mcp.Legacy || (!mcp.IsLegacyVersion(v) && v != mcp.Version20241105) {
		t.Fatalf("era %v, version %q", c.Era(), v)
	}
	t.Logf("server-everything %s speaks %s over HTTP+SSE", c.ServerInfo().Version, c.ProtocolVersion())
	exercise(t, ctx, c)

	// A call cancelled mid-way, once it has reported progress.
	callCtx, cancelCall := context.WithCancel(ctx)
	started := make(chan struct{}, 1)
	_, err = c.CallTool(callCtx, "trigger-long-running-operation", map[string]any{"duration": 60, "steps": 60},
		&client.CallOptions{OnProgress: func(client.Progress) {
			select {
			case started <- struct{}{}:
				cancelCall()
			default:
			}
		}})
	var ce *client.CancelledError
	if !errors.As(err, &ce) || ce.Cancel != client.CancelQueued {
		t.Fatalf("the cancelled call: %v; want a CancelledError whose cancellation was POSTed", err)
	}
	var callID jsonrpc.ID
	for p := range posts.until(ctx, t, func(p post) bool { return p.cancels.IsValid() }) {
		if !p.authorized {
			t.Errorf("%s was POSTed without the caller's Authorization header", p.m.Method)
		}
		if p.m.Method == mcp.MethodToolsCall && bytes.Contains(p.m.Params, []byte(`"duration":60`)) {
			callID = p.m.ID
		}
		if p.cancels.IsValid() && p.cancels != callID {
			t.Fatalf("the cancellation names %v; the cancelled call is %v", p.cancels, callID)
		}
	}
	// The connection goes on serving, progress included.
	echo(t, ctx, c, "after the cancellation")
	progress(t, ctx, c)
}

// The helper's other modes, which the gateway's tests will use: one call
// over stdio and over Streamable HTTP.
func TestOtherModes(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	t.Run("stdio", func(t *testing.T) {
		c, err := client.DialStdio(ctx, everything.Command(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		echo(t, ctx, c, "over stdio")
	})
	t.Run("streamableHttp", func(t *testing.T) {
		c, err := client.DialHTTP(ctx, everything.Start(t, everything.StreamableHTTP), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		echo(t, ctx, c, "over Streamable HTTP")
	})
}

// exercise lists the tools and calls two of them.
func exercise(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()
	tools, err := c.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"echo", "trigger-long-running-operation"} {
		if !slices.Contains(names, want) {
			t.Fatalf("tools/list has no %s: %v", want, names)
		}
	}
	echo(t, ctx, c, "hello")
	progress(t, ctx, c)
}

func echo(t *testing.T, ctx context.Context, c *client.Client, message string) {
	t.Helper()
	res, err := c.CallTool(ctx, "echo", map[string]any{"message": message}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("echo answered %+v", res)
	}
	if text, ok := res.Content[0].(*mcp.TextContent); res.IsError || !ok || text.Text != "Echo: "+message {
		t.Fatalf("echo answered %+v", res.Content[0])
	}
}

// progress runs the long-running tool briefly and checks that its every
// step was reported, increasing, before the result.
func progress(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()
	var got []float64
	res, err := c.CallTool(ctx, "trigger-long-running-operation", map[string]any{"duration": 0.5, "steps": 5},
		&client.CallOptions{OnProgress: func(p client.Progress) {
			if p.Total == nil || *p.Total != 5 {
				t.Errorf("progress %v has total %v; want 5", p.Progress, p.Total)
			}
			got = append(got, p.Progress)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !slices.Equal(got, []float64{1, 2, 3, 4, 5}) {
		t.Fatalf("the long-running call reported %v and answered %+v; want progress 1 to 5", got, res)
	}
}

// post is one message the client POSTed, as the recording proxy saw it.
type post struct {
	m          jsonrpc.Message
	cancels    jsonrpc.ID // the requestId of a notifications/cancelled
	authorized bool       // it carried the caller's Authorization header
}

type posts chan post

// record puts a reverse proxy in front of the server at target and
// returns its URL (the same path) and the messages POSTed through it.
func record(t *testing.T, target string) (string, posts) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	proxy.FlushInterval = -1 // events go through as they come
	seen := make(posts, 1024)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if m, derr := jsonrpc.Decode(bytes.Clone(body)); derr == nil {
				p := post{m: m, authorized: r.Header.Get("Authorization") == "Bearer interop"}
				if m.Method == mcp.NotificationCancelled {
					var cp mcp.CancelledParams
					json.Unmarshal(m.Params, &cp)
					p.cancels = cp.RequestID
				}
				select {
				case seen <- p:
				default:
					t.Error("the recording proxy's buffer is full")
				}
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + u.Path, seen
}

// until yields what was POSTed, in order, up to and including the first
// that last accepts, waiting for it as long as ctx allows.
func (ps posts) until(ctx context.Context, t *testing.T, last func(post) bool) func(func(post) bool) {
	return func(yield func(post) bool) {
		for {
			select {
			case p := <-ps:
				if !yield(p) || last(p) {
					return
				}
			case <-ctx.Done():
				t.Fatal("the client POSTed no such message")
			}
		}
	}
}

package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// seen records what interceptors saw, in order.
type seen struct {
	mu  sync.Mutex
	log []string
}

func (s *seen) add(e string) {
	s.mu.Lock()
	s.log = append(s.log, e)
	s.mu.Unlock()
}

func (s *seen) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

func recording(s *seen, name string) client.Interceptor {
	return func(next client.CallFunc) client.CallFunc {
		return func(ctx context.Context, req *client.Request) (json.RawMessage, error) {
			s.add(name + " > " + req.Method + " " + req.Name + " key=" + req.Key())
			raw, err := next(ctx, req)
			s.add(name + " < " + client.VerdictOfRaw(req, raw, err).Kind.String())
			return raw, err
		}
	}
}

// Every request the client sends for its caller passes the interceptors,
// the first outermost, each seeing the request's key and its verdict; and
// the call's progress still reaches the caller beneath them.
func TestInterceptorsWrapEveryRequest(t *testing.T) {
	var s seen
	opts := &client.Options{Interceptors: []client.Interceptor{recording(&s, "outer"), recording(&s, "inner")}}
	c, _, _ := dialWith(t, opts, func(f *fakeServer, m jsonrpc.Message) {
		switch m.Method {
		case mcp.MethodToolsList:
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"op","inputSchema":{"type":"object"}}]}}`, m.ID)
		case mcp.MethodToolsCall:
			progress(f, m, 1)
			if strings.Contains(string(m.Params), `"k-1"`) {
				f.send(`{"jsonrpc":"2.0","id":%s,"result":{"isError":true,"content":[{"type":"text","text":"no"}]}}`, m.ID)
				return
			}
			result(f, m, "done")
		case mcp.MethodPing:
			f.send(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no ping"}}`, m.ID)
		}
	})
	ctx := context.Background()
	if _, err := c.ListTools(ctx); err != nil {
		t.Fatal(err)
	}
	var got []float64
	if _, err := c.CallTool(ctx, "op", map[string]any{}, &client.CallOptions{OnProgress: func(p client.Progress) { got = append(got, p.Progress) }}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CallTool(ctx, "op", nil, &client.CallOptions{Meta: map[string]any{mcp.MetaIdempotencyKey: "k-1"}}); err != nil {
		t.Fatal(err)
	}
	c.Request(ctx, mcp.MethodPing, "", nil, nil)
	want := []string{
		"outer > tools/list  key=", "inner > tools/list  key=", "inner < succeeded", "outer < succeeded",
		"outer > tools/call op key=", "inner > tools/call op key=", "inner < succeeded", "outer < succeeded",
		"outer > tools/call op key=k-1", "inner > tools/call op key=k-1", "inner < tool_failed", "outer < tool_failed",
		"outer > ping  key=", "inner > ping  key=", "inner < rejected", "outer < rejected",
	}
	if s := s.all(); !slices.Equal(s, want) {
		t.Errorf("the interceptors saw\n%q\nwant\n%q", s, want)
	}
	if !slices.Equal(got, []float64{1}) {
		t.Errorf("progress beneath the interceptors: %v, want [1]", got)
	}
}

// Retrying as an interceptor: a safe tool whose first attempt was lost is
// made again, with a new id, and observe hears of it; an unsafe one is
// not, and its caller gets the attempt's own error.
func TestRetryingInterceptor(t *testing.T) {
	for _, class := range []mcp.RetryClass{mcp.RetryUnsafe, mcp.RetrySafe} {
		t.Run(class.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got calls
				retried := 0
				p := planner("op", class, retry.Options{})
				opts := &client.Options{Interceptors: []client.Interceptor{client.Retrying(
					func(context.Context, *client.Request) *client.Plan { return &client.Plan{Planner: p} },
					func(context.Context, retry.Decision) { retried++ },
				)}}
				c, _, _ := dialWith(t, opts, func(f *fakeServer, m jsonrpc.Message) {
					if m.Method == mcp.MethodToolsCall && got.add(m) > 1 {
						result(f, m, "done")
					} // the first is never answered
				})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				res, err := c.CallTool(ctx, "op", nil, &client.CallOptions{Idle: time.Second})
				synctest.Wait()
				switch class {
				case mcp.RetryUnsafe:
					var de *client.DeadlineError
					if !errors.As(err, &de) || de.Clock != client.IdleClock || got.count() != 1 || retried != 0 {
						t.Fatalf("%d attempts, %d retries, %v; want one attempt and its idle deadline", got.count(), retried, err)
					}
				case mcp.RetrySafe:
					if err != nil || res.IsError || got.count() != 2 || got.ids[0] == got.ids[1] || retried != 1 {
						t.Fatalf("%d attempts with ids %v, %d retries: %v; want two, with new ids", got.count(), got.ids, retried, err)
					}
				}
			})
		})
	}
}

// A tools/call answer that says isError and cannot be read is no success:
// what the call did is in it, so its outcome is unknown (as CallTool,
// which fails it, would have it).
func TestVerdictOfAnUnreadableResult(t *testing.T) {
	req := &client.Request{Method: mcp.MethodToolsCall, Name: "op"}
	for _, raw := range []string{`{"isError":tru`, `{"isError":true,"content":7}`} {
		if v := client.VerdictOfRaw(req, json.RawMessage(raw), nil); v.Outcome != retry.OutcomeUnknown || v.Kind != retry.Lost || v.Err == nil {
			t.Errorf("VerdictOfRaw(%s) = %v %v %v; want unknown, lost, with the reason", raw, v.Outcome, v.Kind, v.Err)
		}
	}
	if v := client.VerdictOfRaw(req, json.RawMessage(`{"content":[]}`), nil); v.Kind != retry.Succeeded {
		t.Errorf("a result = %v; want succeeded", v.Kind)
	}
}

package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// noJitter makes every pause exactly what the server asked for (or none),
// so that a test can tell when the next attempt is due.
func noJitter(int) float64 { return 0 }

// planner is a retry planner that classes tool as class, without jitter.
func planner(tool string, class mcp.RetryClass, o retry.Options) *retry.Planner {
	o.Table.Tools = map[string]retry.Rule{tool: {Class: class}}
	o.Backoff.Jitter = noJitter
	return retry.NewPlanner(o)
}

// calls records when each tools/call reached a scripted server, and what
// it carried.
type calls struct {
	mu   sync.Mutex
	at   []time.Time
	ids  []string
	args []string
}

func (c *calls) add(m jsonrpc.Message) int {
	var p struct{ Arguments json.RawMessage }
	json.Unmarshal(m.Params, &p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, time.Now())
	c.ids = append(c.ids, m.ID.String())
	c.args = append(c.args, string(p.Arguments))
	return len(c.at)
}

func (c *calls) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at)
}

// An Unsafe call whose request may have reached the server is never made
// again: the idle clock fired after it was sent, and the call ends in a
// *retry.ReconcileError that wraps the deadline, after one attempt. A Safe
// tool in the same case is called again, with a new id.
func TestRetriesNeverResendAnUnsafeCallThatMayHaveBeenSent(t *testing.T) {
	for _, class := range []mcp.RetryClass{mcp.RetryUnsafe, mcp.RetrySafe} {
		t.Run(class.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got calls
				c, _ := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
					if m.Method == mcp.MethodToolsCall && got.add(m) > 1 {
						result(f, m, "done")
					} // the first is never answered
				})
				res, err := c.CallToolWithRetries(context.Background(), "charge", map[string]any{"cents": 500},
					&client.CallOptions{Idle: time.Second, Max: time.Minute},
					&client.Retries{Planner: planner("charge", class, retry.Options{})})
				synctest.Wait()
				var rec *retry.ReconcileError
				var de *client.DeadlineError
				switch class {
				case mcp.RetryUnsafe:
					if !errors.As(err, &rec) || !errors.As(err, &de) || de.Clock != client.IdleClock || got.count() != 1 {
						t.Fatalf("%d attempts, %v; want one, and a ReconcileError wrapping the idle deadline", got.count(), err)
					}
				case mcp.RetrySafe:
					if err != nil || res.IsError || got.count() != 2 || got.ids[0] == got.ids[1] {
						t.Fatalf("%d attempts with ids %v: %v; want two, with new ids", got.count(), got.ids, err)
					}
				}
			})
		})
	}
}

// A Conditional tool is retried only when the call carries an
// idempotency key — as its argument, or in _meta, where the server reads
// it too — and then with the same key and byte-identical arguments under
// a new JSON-RPC id; without a key it is Unsafe.
func TestRetriesConditionalOnlyWithAKey(t *testing.T) {
	for _, keyIn := range []string{"none", "arguments", "_meta"} {
		t.Run("key in "+keyIn, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got calls
				c, _ := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
					if m.Method == mcp.MethodToolsCall && got.add(m) > 1 {
						result(f, m, "reserved")
					}
				})
				args := map[string]any{"sku": "w1", "quantity": 3}
				o := &client.CallOptions{Idle: time.Second, Max: time.Minute}
				switch keyIn {
				case "arguments":
					args[mcp.ArgIdempotencyKey] = "k-1"
				case "_meta":
					o.Meta = map[string]any{mcp.MetaIdempotencyKey: "k-1"}
				}
				_, err := c.CallToolWithRetries(context.Background(), "reserve", args, o,
					&client.Retries{Planner: planner("reserve", mcp.RetryConditional, retry.Options{})})
				synctest.Wait()
				var rec *retry.ReconcileError
				if keyIn == "none" {
					if !errors.As(err, &rec) || got.count() != 1 {
						t.Fatalf("without a key: %d attempts, %v; want one and a ReconcileError", got.count(), err)
					}
					return
				}
				if err != nil || got.count() != 2 || got.ids[0] == got.ids[1] || got.args[0] != got.args[1] {
					t.Fatalf("with a key: %d attempts, ids %v, arguments %q: %v; want two, new ids, the same arguments", got.count(), got.ids, got.args, err)
				}
			})
		})
	}
}

// An idempotency key given as null (a nil value in args) is no key: the
// server runs such a call unkeyed, nothing dedupes it, and a Conditional
// tool called so is as Unsafe as one called without the key.
func TestRetriesTakeANullKeyForNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got calls
		c, _ := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method == mcp.MethodToolsCall && got.add(m) > 1 {
				result(f, m, "reserved")
			}
		})
		args := map[string]any{"sku": "w1", mcp.ArgIdempotencyKey: nil}
		_, err := c.CallToolWithRetries(context.Background(), "reserve", args,
			&client.CallOptions{Idle: time.Second, Max: time.Minute},
			&client.Retries{Planner: planner("reserve", mcp.RetryConditional, retry.Options{})})
		synctest.Wait()
		if rec := (*retry.ReconcileError)(nil); !errors.As(err, &rec) || got.count() != 1 {
			t.Fatalf("with a null key: %d attempts, %v; want one and a ReconcileError", got.count(), err)
		}
	})
}

// The pause before a retry is what the server asked for: retryAfterMs in
// an overloaded error's body on stdio, an HTTP 503's Retry-After header,
// and no pause for a Retry-After that does not parse.
func TestRetriesHonourRetryAfter(t *testing.T) {
	overloaded := func(f *fakeServer, m jsonrpc.Message) {
		f.send(`{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":"overloaded","data":{"code":"overloaded","message":"busy","retryable":true,"retryAfterMs":3000}}}`, m.ID, mcp.CodeOverloaded)
	}
	t.Run("retryAfterMs", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var got calls
			c, _ := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
				if m.Method != mcp.MethodToolsCall {
					return
				}
				if got.add(m) == 1 {
					overloaded(f, m)
					return
				}
				result(f, m, "ok")
			})
			_, err := c.CallToolWithRetries(context.Background(), "read", nil, nil,
				&client.Retries{Planner: planner("read", mcp.RetrySafe, retry.Options{})})
			if err != nil || got.count() != 2 || got.at[1].Sub(got.at[0]) != 3*time.Second {
				t.Fatalf("%d attempts at %v: %v; want the second 3s after the first", got.count(), got.at, err)
			}
			if got.args[0] != "" || got.args[1] != "" {
				t.Fatalf("nil arguments sent as %q; want none", got.args)
			}
		})
	})
	for header, want := range map[string]time.Duration{"2": 2 * time.Second, "soon": 0} {
		t.Run("Retry-After: "+header, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var at []time.Time
				hc := servePipe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					m := readPosted(r)
					w.Header().Set("Content-Type", "application/json")
					if m.Method == mcp.MethodDiscover {
						fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}`, m.ID)
						return
					}
					mu.Lock()
					at = append(at, time.Now())
					n := len(at)
					mu.Unlock()
					if n == 1 {
						w.Header().Set("Retry-After", header)
						http.Error(w, "busy", http.StatusServiceUnavailable)
						return
					}
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","content":[]}}`, m.ID)
				}))
				c, err := client.DialHTTP(context.Background(), "http://mcp.test/mcp", &client.Options{HTTPClient: hc, Era: mcp.Modern})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_, err = c.CallToolWithRetries(context.Background(), "read", nil, nil,
					&client.Retries{Planner: planner("read", mcp.RetrySafe, retry.Options{})})
				mu.Lock()
				defer mu.Unlock()
				if err != nil || len(at) != 2 || at[1].Sub(at[0]) != want {
					t.Fatalf("%d attempts at %v: %v; want the second %v after the first", len(at), at, err, want)
				}
			})
		})
	}
}

// A target whose retry budget is spent gets no retry, even of a Safe
// call that the attempt cap would allow: the call ends with the
// attempt's own error, and the planner's observer is told why.
func TestRetriesStopWhenTheBudgetIsSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got calls
		c, _ := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method == mcp.MethodToolsCall {
				got.add(m)
				f.send(`{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":"overloaded"}}`, m.ID, mcp.CodeOverloaded)
			}
		})
		var why error
		p := planner("read", mcp.RetrySafe, retry.Options{
			MaxAttempts: 5,
			Budget:      &retry.Budget{Ratio: -1, MinPerSecond: -1}, // nothing to spend
			Observe: func(e retry.Event) {
				if !e.Start {
					why = e.Decision.Err
				}
			},
		})
		_, err := c.CallToolWithRetries(context.Background(), "read", nil, nil, &client.Retries{Planner: p})
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != mcp.CodeOverloaded || got.count() != 1 || !errors.Is(why, retry.ErrBudgetExhausted) {
			t.Fatalf("%d attempts, %v (planner: %v); want one, the overloaded error, and a spent budget", got.count(), err, why)
		}
	})
}

// One maximum deadline bounds the whole call: a retry whose pause would
// end after it is not made, and the call ends with the attempt's error
// at once, not after the pause.
func TestRetriesEndWithinTheMaxDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got calls
		c, _ := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method == mcp.MethodToolsCall {
				got.add(m)
				f.send(`{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":"overloaded","data":{"code":"overloaded","message":"busy","retryable":true,"retryAfterMs":10000}}}`, m.ID, mcp.CodeOverloaded)
			}
		})
		start := time.Now()
		_, err := c.CallToolWithRetries(context.Background(), "read", nil, &client.CallOptions{Max: 5 * time.Second},
			&client.Retries{Planner: planner("read", mcp.RetrySafe, retry.Options{})})
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || got.count() != 1 || time.Since(start) != 0 {
			t.Fatalf("after %v, %d attempts: %v; want one, ended at once", time.Since(start), got.count(), err)
		}
	})
}

// The caller's cancel during the pause between attempts ends the call
// with a *CancelledError and no further attempt.
func TestRetriesCancelledBetweenAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got calls
		c, _ := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method == mcp.MethodToolsCall {
				got.add(m)
				f.send(`{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":"overloaded","data":{"code":"overloaded","message":"busy","retryable":true,"retryAfterMs":3000}}}`, m.ID, mcp.CodeOverloaded)
			}
		})
		ctx, cancel := context.WithCancelCause(context.Background())
		stop := errors.New("the user gave up")
		p := planner("read", mcp.RetrySafe, retry.Options{Observe: func(e retry.Event) {
			if e.Decision.Retry {
				cancel(stop) // during the pause that follows
			}
		}})
		_, err := c.CallToolWithRetries(ctx, "read", nil, nil, &client.Retries{Planner: p})
		var ce *client.CancelledError
		if !errors.As(err, &ce) || !errors.Is(err, stop) || got.count() != 1 {
			t.Fatalf("%d attempts: %v; want one and a CancelledError", got.count(), err)
		}
	})
}

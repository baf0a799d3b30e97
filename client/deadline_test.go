package client_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// The maximum deadline fires with no progress at all, and the server is
// told to cancel the request it names.
func TestMaxFiresWithoutProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, f := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {}) // never answers
		start := time.Now()
		_, err := c.CallTool(context.Background(), "slow", nil, &client.CallOptions{Idle: time.Hour, Max: 5 * time.Second})
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Clock != client.MaxClock || time.Since(start) != 5*time.Second {
			t.Fatalf("after %v: %v; want the max deadline at 5s", time.Since(start), err)
		}
		synctest.Wait()
		calls, cancels := f.sent(mcp.MethodToolsCall), f.sent(mcp.NotificationCancelled)
		if len(cancels) != 1 || string(cancels[0].Params) == "" || !containsID(cancels[0].Params, calls[0].ID) {
			t.Fatalf("cancellations sent: %v, for call %v", cancels, calls[0].ID)
		}
	})
}

// Increasing progress resets the idle clock, and only the idle clock:
// the call outlives several idle periods and still ends at the maximum.
// A report that does not increase resets nothing, never reaches the
// callback, and is counted.
func TestProgressResetsOnlyIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stop := make(chan struct{})
		c, _ := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method == mcp.NotificationCancelled {
				close(stop)
			}
			if m.Method != mcp.MethodToolsCall {
				return
			}
			go func() {
				for i := 1; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(4 * time.Second):
					}
					progress(f, m, float64(i))
					progress(f, m, float64(i)) // a repeat: not an increase
				}
			}()
		})
		var seen []float64
		start := time.Now()
		_, err := c.CallTool(context.Background(), "slow", nil, &client.CallOptions{Idle: 5 * time.Second, Max: 30 * time.Second,
			OnProgress: func(p client.Progress) { seen = append(seen, p.Progress) }})
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Clock != client.MaxClock || time.Since(start) != 30*time.Second {
			t.Fatalf("after %v: %v; want the max deadline at 30s despite progress every 4s", time.Since(start), err)
		}
		if len(seen) != 7 || seen[0] != 1 || seen[6] != 7 {
			t.Fatalf("the callback saw %v, want 1..7", seen)
		}
		synctest.Wait()
		if got := c.Stats().ProgressRefused; got != 7 {
			t.Fatalf("ProgressRefused = %d, want the 7 repeats", got)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// Only repeats: the idle clock is never reset.
		stop := make(chan struct{})
		c, _ := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method == mcp.NotificationCancelled {
				close(stop)
			}
			if m.Method != mcp.MethodToolsCall {
				return
			}
			go func() {
				progress(f, m, 1)
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Second):
					}
					progress(f, m, 1)
				}
			}()
		})
		start := time.Now()
		_, err := c.CallTool(context.Background(), "slow", nil, &client.CallOptions{Idle: 5 * time.Second, Max: time.Minute})
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Clock != client.IdleClock || time.Since(start) != 5*time.Second {
			t.Fatalf("after %v: %v; want the idle deadline at 5s", time.Since(start), err)
		}
	})
}

// A response that arrives after the client gave up is ignored and
// counted; the next call is unaffected.
func TestLateResponseIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
			switch m.Method {
			case mcp.NotificationCancelled:
				// The server finished anyway: its response crosses the
				// cancellation.
				var p mcp.CancelledParams
				jsonUnmarshal(m.Params, &p)
				f.send(`{"jsonrpc":"2.0","id":%s,"result":{"content":[]}}`, p.RequestID)
			case mcp.MethodToolsCall:
				if name(m) == "quick" {
					result(f, m, "quick")
				}
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Second); cancel() }()
		_, err := c.CallTool(ctx, "slow", nil, nil)
		var ce *client.CancelledError
		if !errors.As(err, &ce) || !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled call = %v", err)
		}
		synctest.Wait()
		if got := c.Stats(); got.LateResponses != 1 || got.Cancellations != 1 {
			t.Fatalf("stats %+v; want one late response ignored after one cancellation", got)
		}
		res, err := c.CallTool(context.Background(), "quick", nil, nil)
		if err != nil || len(res.Content) != 1 {
			t.Fatalf("the next call: %+v, %v", res, err)
		}
	})
}

// The era is negotiated: a server that refuses server/discover is spoken
// to after initialize, with no modern _meta on its requests.
func TestFallsBackToInitialize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, f := dial(t, true, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method == mcp.MethodToolsCall {
				result(f, m, "ok")
			}
		})
		if c.Era() != mcp.Legacy || c.ProtocolVersion() != mcp.Version20251125 || c.ServerInfo().Name != "fake" {
			t.Fatalf("era %v, version %q, server %+v", c.Era(), c.ProtocolVersion(), c.ServerInfo())
		}
		if _, err := c.CallTool(context.Background(), "x", nil, nil); err != nil {
			t.Fatal(err)
		}
		call := f.sent(mcp.MethodToolsCall)[0]
		if containsKey(call.Params, mcp.MetaProtocolVersion) {
			t.Fatalf("a legacy request carries the modern _meta: %s", call.Params)
		}
		if len(f.sent(mcp.NotificationInitialized)) != 1 {
			t.Fatal("notifications/initialized was not sent")
		}
	})
}

// A caller's own deadline sooner than the max clock ends the call then,
// as the caller's: a *CancelledError for context.DeadlineExceeded, not
// the client's *DeadlineError, and the server is told to cancel. A
// caller's deadline later than the max clock leaves the max clock in
// charge.
func TestCallersDeadlineAgainstMax(t *testing.T) {
	for _, c := range []struct {
		name       string
		caller     time.Duration
		wantMax    bool
		wantEndsAt time.Duration
	}{
		{"caller sooner", 2 * time.Second, false, 2 * time.Second},
		{"max sooner", time.Hour, true, 5 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cl, f := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {}) // never answers
				ctx, cancel := context.WithTimeout(context.Background(), c.caller)
				defer cancel()
				start := time.Now()
				_, err := cl.CallTool(ctx, "slow", nil, &client.CallOptions{Max: 5 * time.Second})
				if time.Since(start) != c.wantEndsAt {
					t.Fatalf("ended after %v, want %v: %v", time.Since(start), c.wantEndsAt, err)
				}
				var de *client.DeadlineError
				var ce *client.CancelledError
				switch {
				case c.wantMax && (!errors.As(err, &de) || de.Clock != client.MaxClock):
					t.Fatalf("%v; want the max clock's *DeadlineError", err)
				case !c.wantMax && (!errors.As(err, &ce) || !errors.Is(err, context.DeadlineExceeded)):
					t.Fatalf("%v; want a *CancelledError for the caller's deadline", err)
				}
				synctest.Wait()
				if n := len(f.sent(mcp.NotificationCancelled)); n != 1 {
					t.Fatalf("%d cancellations sent, want 1", n)
				}
			})
		})
	}
}

package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// researcher is an upstream whose tool "research" runs only as a task of
// its own, in steps it reports as the task's status message, each step
// waiting for the test (step) or a cancellation.
type researcher struct {
	url  string
	runs atomic.Int64 // the tool's handler was entered
	step chan struct{}
	// ended says how each run ended: "done", or the error that stopped it.
	ended chan string
	// cancels is told of each tasks/cancel the upstream has answered.
	cancels chan struct{}
}

const researchSteps = 3

func newResearcher(t *testing.T) *researcher {
	t.Helper()
	r := &researcher{step: make(chan struct{}), ended: make(chan string, 8), cancels: make(chan struct{}, 8)}
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "upstream.db"), nil)
	must(t, err)
	t.Cleanup(func() { db.Close() })
	st, err := tasks.Open(context.Background(), db, &tasks.Options{PollInterval: 10 * time.Millisecond})
	must(t, err)
	srv := mcptest.NewServer(t, nil)
	ts, err := taskserver.New(srv, st, nil)
	must(t, err)
	t.Cleanup(func() { ts.Shutdown(context.Background()) })
	must(t, srv.AddTool(server.Tool{Name: "research", Policy: server.Policy{Timeout: server.TimeoutLong}},
		func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
			r.runs.Add(1)
			for i := 1; i <= researchSteps; i++ {
				if err := taskserver.Checkpoint(ctx, call, fmt.Sprintf("step %d of %d", i, researchSteps)); err != nil {
					r.ended <- err.Error()
					return nil, err
				}
				select {
				case <-r.step:
				case <-ctx.Done():
					r.ended <- context.Cause(ctx).Error()
					return nil, ctx.Err()
				}
			}
			r.ended <- "done"
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("report on " + string(call.Arguments))}}, nil
		}, taskserver.AsTask(ts, taskserver.Policy{Required: true})))
	h, err := streamhttp.NewHandler(srv, nil)
	must(t, err)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, req)
		if bytes.Contains(body, []byte(`"method":"tasks/cancel"`)) {
			r.cancels <- struct{}{} // answered: the intent is recorded
		}
	}))
	t.Cleanup(hs.Close)
	r.url = hs.URL
	return r
}

// advance lets the upstream's task take its next step.
func (r *researcher) advance(t *testing.T) {
	t.Helper()
	select {
	case r.step <- struct{}{}:
	case <-time.After(wait):
		t.Fatal("the upstream's task never waited for its next step")
	}
}

// gatewayTasks is a task server on a store of its own (file, so that a
// second gateway may share it) for a gateway in front.
func gatewayTasks(t *testing.T, file string) (*server.Server, *taskserver.Server) {
	t.Helper()
	db, err := store.Open(context.Background(), file, nil)
	must(t, err)
	t.Cleanup(func() { db.Close() })
	st, err := tasks.Open(context.Background(), db, &tasks.Options{PollInterval: 10 * time.Millisecond})
	must(t, err)
	srv := mcptest.NewServer(t, &server.Options{ProgressInterval: time.Nanosecond})
	ts, err := taskserver.New(srv, st, nil)
	must(t, err)
	t.Cleanup(func() { ts.Shutdown(context.Background()) })
	return srv, ts
}

// An upstream's own task, in either era: the downstream client gets a
// task of the gateway's, scoped to its tenant, that follows the
// upstream's — its status messages shown, its result returned — and the
// upstream runs the tool once. A 2025-era upstream declares the tool
// task-only, and the gateway declares it a task downstream without a
// policy (optional: a client that cannot take a task gets a call's
// result, TestUpstreamTaskFollowedInline); a 2026-07-28 upstream decides
// per call, and the policy makes it a task.
func TestUpstreamTaskIsFollowed(t *testing.T) {
	for _, up := range eras {
		t.Run("upstream-"+up.name, func(t *testing.T) {
			r := newResearcher(t)
			srv, gts := gatewayTasks(t, filepath.Join(t.TempDir(), "gateway.db"))
			pol := &gateway.Policy{}
			if up.era == mcp.Modern {
				pol.Tools = map[string]gateway.ToolPolicy{"research": {Task: &taskserver.Policy{Required: true}}}
			}
			f := newFrontOn(t, srv, gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: r.url}},
				Client: client.Options{Era: up.era}, Tasks: gts, Policy: pol}, nil)
			if up.era == mcp.Legacy {
				legacy := f.dial(t, mcp.Legacy, nil)
				tools, err := legacy.ListTools(context.Background())
				must(t, err)
				i := slices.IndexFunc(tools, func(tl mcp.Tool) bool { return tl.Name == "research" })
				if i < 0 || tools[i].Execution == nil || tools[i].Execution.TaskSupport != mcp.TaskOptional {
					t.Fatalf("the upstream's task-only tool is listed downstream as %+v", tools)
				}
			}
			c := taskClient(t, f)
			messages := make(chan string, 256)
			done := make(chan *mcp.CallToolResult, 1)
			go func() {
				res, err := c.CallToolTask(context.Background(), "research", map[string]any{"topic": "tides"}, nil, func(_, message string) {
					select {
					case messages <- message:
					default:
					}
				})
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			// Each step is taken once the downstream client has seen the
			// upstream's message for it: the gateway shows it.
			for i := 1; i <= researchSteps; i++ {
				want := fmt.Sprintf("step %d of %d", i, researchSteps)
				for m := ""; m != want; m = recv(t, messages, "the status message "+want) {
				}
				r.advance(t)
			}
			res := recv(t, done, "the task's result")
			if res == nil || !strings.Contains(text(res), "tides") || r.runs.Load() != 1 {
				t.Fatalf("the task's result = %+v; the upstream ran %d times", res, r.runs.Load())
			}
		})
	}
}

// tasks/cancel of the gateway's task reaches the upstream's task as its
// own tasks/cancel; the upstream's task ends cancelled at its next step,
// and so does the gateway's: the upstream's word for how it ended. The
// tool ran once.
func TestUpstreamTaskCancelled(t *testing.T) {
	for _, up := range eras {
		t.Run("upstream-"+up.name, func(t *testing.T) {
			r := newResearcher(t)
			srv, gts := gatewayTasks(t, filepath.Join(t.TempDir(), "gateway.db"))
			f := newFrontOn(t, srv, gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: r.url}},
				Client: client.Options{Era: up.era}, Tasks: gts,
				Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"research": {Task: &taskserver.Policy{Required: true}}}}}, nil)
			c := taskClient(t, f)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := c.CallToolTask(ctx, "research", map[string]any{"topic": "tides"}, nil, func(_, message string) {
					if message == "step 1 of 3" {
						cancel() // the upstream's task is working: give up on it
					}
				})
				done <- err
			}()
			recv(t, r.cancels, "the upstream's tasks/cancel")
			r.advance(t) // its next checkpoint observes the intent
			if ended := recv(t, r.ended, "the upstream's task's end"); !strings.Contains(ended, "cancel") {
				t.Fatalf("the upstream's task ended %q, want cancelled", ended)
			}
			var ce *client.CancelledError
			if err := recv(t, done, "the downstream's end"); !errors.As(err, &ce) {
				t.Fatalf("the downstream's task ended with %v, want it cancelled", err)
			}
			if n := r.runs.Load(); n != 1 {
				t.Fatalf("the upstream ran %d times", n)
			}
		})
	}
}

// A gateway that stops while its task follows an upstream task leaves it
// to the gateway that takes the task over, which follows the same
// upstream task by the id the first one kept: the tool runs once, and its
// result reaches the client. A tasks/cancel that comes while no gateway
// holds the task is not taken for the end: the gateway that takes it
// over passes it upstream and ends the task by what the upstream says.
func TestUpstreamTaskOutlivesItsGateway(t *testing.T) {
	for _, cancelMeanwhile := range []bool{false, true} {
		t.Run(map[bool]string{false: "completed", true: "cancelled-meanwhile"}[cancelMeanwhile], func(t *testing.T) {
			r := newResearcher(t)
			file := filepath.Join(t.TempDir(), "gateway.db")
			opts := func(ts *taskserver.Server) gateway.Options {
				return gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: r.url}},
					Client: client.Options{Era: mcp.Legacy}, Tasks: ts}
			}
			srvA, tsA := gatewayTasks(t, file)
			a := newFrontOn(t, srvA, opts(tsA), nil)
			srvB, tsB := gatewayTasks(t, file)
			b := newFrontOn(t, srvB, opts(tsB), nil)

			ca := taskClient(t, a)
			id, _, err := ca.StartToolTask(context.Background(), "research", map[string]any{"topic": "tides"}, nil)
			must(t, err)
			// Followed until the gateway shows the upstream task's first
			// step: it has kept the upstream task's id by then.
			seen, stop := context.WithCancel(context.Background())
			_, err = ca.FollowTask(seen, id, nil, func(_, message string) {
				if message == "step 1 of 3" {
					stop()
				}
			})
			var abandoned *client.TaskAbandonedError
			if !errors.As(err, &abandoned) || !abandoned.Left {
				t.Fatalf("following the gateway's task = %v", err)
			}
			must(t, tsA.Shutdown(context.Background())) // gateway A stops: its task is left

			cb := taskClient(t, b)
			if cancelMeanwhile {
				must(t, cb.CancelTask(context.Background(), id))
			}
			tsB.MaintainOnce(context.Background()) // B takes the task over
			done := make(chan error, 1)
			var res *mcp.CallToolResult
			go func() {
				var err error
				res, err = cb.FollowTask(context.Background(), id, nil, nil)
				done <- err
			}()
			if cancelMeanwhile {
				recv(t, r.cancels, "the upstream's tasks/cancel")
				r.advance(t)
				if err := recv(t, done, "the task's end"); !errors.Is(err, client.ErrTaskCancelled) {
					t.Fatalf("the task cancelled while no gateway held it ended with %v, want cancelled by the upstream's word", err)
				}
			} else {
				for range researchSteps {
					r.advance(t)
				}
				if err := recv(t, done, "the task's end"); err != nil || !strings.Contains(text(res), "tides") {
					t.Fatalf("the task taken over = %+v, %v", res, err)
				}
				select {
				case <-r.cancels:
					t.Fatal("the upstream's task was cancelled when its gateway stopped")
				default:
				}
			}
			if n := r.runs.Load(); n != 1 {
				t.Fatalf("the upstream ran the tool %d times, want once", n)
			}
		})
	}
}

// A client that cannot take a task still gets a call's result from a
// tool its upstream runs only as a task, whether the gateway has tasks
// of its own or not: the gateway asks the upstream for the task — a
// 2025-era upstream declares it task-only, a 2026-07-28 one refuses the
// plain call (-32021) first — and follows it within the call's clocks.
func TestUpstreamTaskFollowedInline(t *testing.T) {
	for _, up := range eras {
		for _, withTasks := range []bool{false, true} {
			for _, down := range eras {
				t.Run(fmt.Sprintf("upstream-%s-tasks-%v-from-%s", up.name, withTasks, down.name), func(t *testing.T) {
					testUpstreamTaskFollowedInline(t, up, down, withTasks)
				})
			}
		}
	}
}

func testUpstreamTaskFollowedInline(t *testing.T, up, down eraCase, withTasks bool) {
	r := newResearcher(t)
	opts := gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: r.url}}, Client: client.Options{Era: up.era}}
	var f *front
	if withTasks {
		srv, gts := gatewayTasks(t, filepath.Join(t.TempDir(), "gateway.db"))
		opts.Tasks = gts
		f = newFrontOn(t, srv, opts, nil)
	} else {
		f = newFront(t, opts, nil)
	}
	c := f.dial(t, down.era, nil)
	type end struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan end, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "research", map[string]any{"topic": "tides"}, nil)
		done <- end{res, err}
	}()
	for range researchSteps {
		r.advance(t)
	}
	got := recv(t, done, "the call's end")
	if got.err != nil || got.res.IsError || !strings.Contains(text(got.res), "tides") || r.runs.Load() != 1 {
		t.Fatalf("the call = %+v, %v; the upstream ran %d times", got.res, got.err, r.runs.Load())
	}
}

// The downstream id of an upstream's task is the gateway's, scoped to the
// tenant: another tenant can neither read nor cancel it, and the
// upstream's own id is never shown to anyone to try on the upstream.
func TestUpstreamTaskIsTheTenants(t *testing.T) {
	r := newResearcher(t)
	srv, gts := gatewayTasks(t, filepath.Join(t.TempDir(), "gateway.db"))
	f := newFrontOn(t, srv, gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: r.url}},
		Client: client.Options{Era: mcp.Legacy}, Tasks: gts},
		&streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
	as := func(token string) *client.Client {
		return f.dial(t, mcp.Modern, &client.Options{Header: http.Header{"Authorization": {"Bearer " + token}},
			Capabilities: mcp.ClientCapabilities{Extensions: map[string]json.RawMessage{mcp.ExtensionTasks: json.RawMessage(`{}`)}}})
	}
	alice, bob := as("tok-a"), as("tok-b")
	id, _, err := alice.StartToolTask(context.Background(), "research", map[string]any{"topic": "tides"}, nil)
	must(t, err)
	for _, method := range []string{mcp.MethodTasksGet, mcp.MethodTasksCancel} {
		if _, err := bob.Request(context.Background(), method, id, map[string]any{"taskId": id}, nil); err == nil || !strings.Contains(err.Error(), "-32602") {
			t.Fatalf("bob's %s of alice's task = %v, want unknown task (-32602)", method, err)
		}
	}
	raw, err := alice.Request(context.Background(), mcp.MethodTasksGet, id, map[string]any{"taskId": id}, nil)
	must(t, err)
	if strings.Contains(string(raw), "upstreamTaskId") {
		t.Fatalf("tasks/get shows the upstream's own id: %s", raw)
	}
	done := make(chan error, 1)
	go func() {
		_, err := alice.FollowTask(context.Background(), id, nil, nil)
		done <- err
	}()
	for range researchSteps {
		r.advance(t)
	}
	if err := recv(t, done, "alice's task's end"); err != nil {
		t.Fatalf("alice's task, after bob's tries = %v", err)
	}
}

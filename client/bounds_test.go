package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// dialWith is dial with options: a client over in-memory pipes to a
// scripted server.
func dialWith(t *testing.T, o *client.Options, handle func(f *fakeServer, m jsonrpc.Message)) (*client.Client, *fakeServer, *io.PipeReader) {
	t.Helper()
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	f := &fakeServer{t: t, out: fromServer}
	f.handle = func(m jsonrpc.Message) { handle(f, m) }
	go f.serve(toServer)
	c, err := client.Connect(context.Background(), toClient, fromClient, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); fromServer.Close(); toServer.Close() })
	return c, f, toServer
}

// A stdio server that floods ping requests and stops reading the client's
// stdin cannot hold a call past its deadline: the call returns when its
// max clock fires, and the flood costs neither goroutines nor memory —
// the answers the client cannot write are dropped and counted.
func TestPingFloodDoesNotHoldTheCall(t *testing.T) {
	const flood = 5000
	synctest.Test(t, func(t *testing.T) {
		flooded, stop := make(chan struct{}), make(chan struct{})
		c, _, _ := dialWith(t, nil, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method != mcp.MethodToolsCall {
				return
			}
			// From now on the server reads nothing: this handler runs on
			// its reading goroutine and never returns to it.
			for i := range flood {
				f.send(`{"jsonrpc":"2.0","id":"ping-%d","method":"ping"}`, i)
			}
			close(flooded)
			<-stop
		})
		t.Cleanup(func() { close(stop) })
		base := runtime.NumGoroutine()
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := c.CallTool(context.Background(), "slow", nil, &client.CallOptions{Max: 5 * time.Second})
			done <- err
		}()
		<-flooded
		synctest.Wait()
		if n := runtime.NumGoroutine() - base; n > 8 {
			t.Errorf("%d goroutines more while the server floods %d pings; want a handful", n, flood)
		}
		err := <-done
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Clock != client.MaxClock || time.Since(start) != 5*time.Second {
			t.Fatalf("after %v: %v; want the max deadline at 5s", time.Since(start), err)
		}
		// One answer is on its way (the write the server never reads)
		// and at most the answers' share of the queue waits behind it.
		if st := c.Stats(); st.ServerRequestsDropped < flood-20 {
			t.Fatalf("ServerRequestsDropped = %d of %d pings; want all but the queue's share", st.ServerRequestsDropped, flood)
		}
	})
}

// A stdio server that sends a burst of requests for a handler — one
// question for each of many calls in flight, say — gets every answer,
// however many are ready before it reads the first: an answer that finds
// the answers' share of the write queue full waits for room, within its
// own deadline, rather than being dropped while the server reads on and
// waits for it.
func TestABurstOfServerRequestsIsAnsweredInFull(t *testing.T) {
	const sent = 40
	synctest.Test(t, func(t *testing.T) {
		o := &client.Options{MaxServerRequests: 64, OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "not during a call") // as a gateway refuses what it cannot attribute
		}}
		gate := make(chan struct{})
		var mu sync.Mutex
		answered := 0
		c, _, _ := dialWith(t, o, func(f *fakeServer, m jsonrpc.Message) {
			switch {
			case m.Method == mcp.MethodToolsCall:
				for i := range sent {
					f.send(`{"jsonrpc":"2.0","id":"q-%d","method":"elicitation/create","params":{"message":"?"}}`, i)
				}
				<-gate // the server reads nothing more until the answers are all ready
				result(f, m, "done")
			case m.Kind == jsonrpc.KindResponse && m.Error != nil && m.Error.Code == jsonrpc.CodeMethodNotFound:
				mu.Lock()
				answered++
				mu.Unlock()
			}
		})
		done := make(chan error, 1)
		go func() {
			_, err := c.CallTool(context.Background(), "ask", nil, nil)
			done <- err
		}()
		synctest.Wait() // every answer is written, queued, waiting for room — or dropped
		if st := c.Stats(); st.ServerRequestsDropped != 0 {
			t.Errorf("%d of %d answers dropped while the server was about to read them", st.ServerRequestsDropped, sent)
		}
		close(gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if answered != sent {
			t.Fatalf("the server got %d answers to its %d requests", answered, sent)
		}
	})
}

// The requests a stdio server sends for a handler are answered at most 16
// at a time; past that they are refused at once with CodeOverloaded, and
// a refused request never reaches the handler.
func TestServerRequestsAnsweredAtOnceAreBounded(t *testing.T) {
	const sent = 40
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var running, peak atomic.Int64
		o := &client.Options{OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-release
			return map[string]any{"action": "decline"}, nil
		}}
		var mu sync.Mutex
		refused, answered := 0, 0
		c, f, _ := dialWith(t, o, func(f *fakeServer, m jsonrpc.Message) {
			if m.Kind != jsonrpc.KindResponse {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case m.Error != nil && m.Error.Code == mcp.CodeOverloaded:
				refused++
			case m.Error == nil:
				answered++
			}
		})
		for i := range sent {
			// One at a time: a server that reads its answers promptly
			// gets every refusal.
			f.send(`{"jsonrpc":"2.0","id":%d,"method":"elicitation/create","params":{"message":"?"}}`, i)
			synctest.Wait()
		}
		if got := running.Load(); got != 16 {
			t.Fatalf("%d handlers running; want 16", got)
		}
		mu.Lock()
		if refused != sent-16 {
			t.Errorf("%d requests refused with CodeOverloaded; want %d", refused, sent-16)
		}
		mu.Unlock()
		close(release)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if answered != 16 || peak.Load() != 16 || c.Stats().ServerRequestsRefused != sent-16 {
			t.Fatalf("answered %d, peak %d, stats %+v; want 16 answered, 16 at most at once", answered, peak.Load(), c.Stats())
		}
	})
}

// A 2025 HTTP server that sends a flood of requests on its GET stream and
// holds every answer POST open gets at most 16 answer POSTs at once (each
// connection one); the rest are dropped and counted, the held POSTs end
// at their timeout, and the client's call still ends at its deadline.
func TestHTTPAnswerFloodIsBounded(t *testing.T) {
	const flood = 2000
	synctest.Test(t, func(t *testing.T) {
		var held, peak atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				w.Header().Set("Content-Type", "text/event-stream")
				for i := range flood {
					fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"ping-%d\",\"method\":\"ping\"}\n\n", i)
				}
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				return
			}
			if r.Method == http.MethodDelete {
				return
			}
			m := readPosted(r)
			switch {
			case m.Method == "" && m.Result != nil: // an answer: held open
				n := held.Add(1)
				defer held.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				<-r.Context().Done()
			case m.Method == mcp.MethodInitialize:
				w.Header().Set("Mcp-Session-Id", "s1")
				answerInitialize(w, m.ID, "flood")
			case m.Method == mcp.MethodToolsCall:
				<-r.Context().Done() // never answered
			default:
				w.WriteHeader(http.StatusAccepted)
			}
		})
		hc := servePipe(t, h)
		c, err := client.DialHTTP(context.Background(), "http://mcp.test/mcp", &client.Options{HTTPClient: hc, Era: mcp.Legacy})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		_, err = c.CallTool(context.Background(), "slow", nil, &client.CallOptions{Max: 5 * time.Second})
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Clock != client.MaxClock || time.Since(start) != 5*time.Second {
			t.Fatalf("after %v: %v; want the max deadline at 5s", time.Since(start), err)
		}
		synctest.Wait()
		if p := peak.Load(); p != 16 {
			t.Fatalf("%d answer POSTs held at once; want 16", p)
		}
		if st := c.Stats(); st.ServerRequestsDropped != flood-16 {
			t.Fatalf("ServerRequestsDropped = %d; want %d", st.ServerRequestsDropped, flood-16)
		}
		time.Sleep(30 * time.Second) // the answers' timeout
		synctest.Wait()
		if n := held.Load(); n != 0 {
			t.Fatalf("%d answer POSTs still held after their timeout", n)
		}
	})
}

// listPages is a scripted server whose tools/list never ends: each page
// carries one tool of size bytes and a next cursor, after delay.
func listPages(size int, delay time.Duration, pages *atomic.Int64) func(f *fakeServer, m jsonrpc.Message) {
	desc := strings.Repeat("x", size)
	return func(f *fakeServer, m jsonrpc.Message) {
		if m.Method != mcp.MethodToolsList {
			return
		}
		n := pages.Add(1)
		send := func() {
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","tools":[{"name":"t%d","description":%q,"inputSchema":{"type":"object"}}],"nextCursor":"c%d"}}`,
				m.ID, n, desc, n)
		}
		if delay == 0 {
			send()
			return
		}
		go func() { time.Sleep(delay); send() }()
	}
}

// A tools/list that never ends is cut at the client's bounds: in pages,
// in bytes, and in time (one max clock for the whole listing).
func TestEndlessListIsBounded(t *testing.T) {
	t.Run("pages", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var pages atomic.Int64
			c, _, _ := dialWith(t, nil, listPages(10, 0, &pages))
			_, err := c.ListTools(context.Background())
			var le *client.ListLimitError
			if !errors.As(err, &le) || le.Limit != "pages" || pages.Load() != client.DefaultMaxListPages ||
				!strings.Contains(err.Error(), "MaxListPages") {
				t.Fatalf("after %d pages: %v; want the page limit at %d, naming MaxListPages", pages.Load(), err, client.DefaultMaxListPages)
			}
		})
	})
	t.Run("bytes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var pages atomic.Int64
			c, _, _ := dialWith(t, &client.Options{MaxListBytes: 1 << 20}, listPages(64<<10, 0, &pages))
			_, err := c.ListTools(context.Background())
			var le *client.ListLimitError
			if !errors.As(err, &le) || le.Limit != "bytes" || pages.Load() != 16 || !strings.Contains(err.Error(), "MaxListBytes") {
				t.Fatalf("after %d pages: %v; want the byte limit after 16 pages of 64 KiB, naming MaxListBytes", pages.Load(), err)
			}
		})
	})
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var pages atomic.Int64
			c, _, _ := dialWith(t, nil, listPages(10, time.Second, &pages))
			start := time.Now()
			_, err := c.ListTools(context.Background())
			var de *client.DeadlineError
			if !errors.As(err, &de) || de.Clock != client.MaxClock || time.Since(start) != client.DefaultMax {
				t.Fatalf("after %v and %d pages: %v; want the listing's max deadline at %v", time.Since(start), pages.Load(), err, client.DefaultMax)
			}
			// The caller's deadline comes first when it is earlier.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start = time.Now()
			if _, err := c.ListTools(ctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 3*time.Second {
				t.Fatalf("after %v: %v; want the caller's deadline at 3s", time.Since(start), err)
			}
			time.Sleep(time.Second) // the page in flight is answered before the bubble ends
		})
	})
}

// taskServer scripts a 2026-07-28 server whose tools/call creates task
// t1; poll(n) gives the fields the n-th tasks/get reports of it after its
// id (its status and whatever goes with it), and tasks/cancel is counted
// and acknowledged with the task still working.
func taskServer(poll func(n int) string, polls, cancels *atomic.Int64) func(f *fakeServer, m jsonrpc.Message) {
	return func(f *fakeServer, m jsonrpc.Message) {
		switch m.Method {
		case mcp.MethodToolsCall:
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"task","taskId":"t1","status":"working","pollIntervalMs":1000}}`, m.ID)
		case mcp.MethodTasksGet:
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","taskId":"t1",%s}}`, m.ID, poll(int(polls.Add(1))))
		case mcp.MethodTasksCancel:
			cancels.Add(1)
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","taskId":"t1","status":"working"}}`, m.ID)
		}
	}
}

// workingWith is a poll of a task still working with status message msg.
func workingWith(msg string) string {
	return fmt.Sprintf(`"status":"working","statusMessage":%q,"pollIntervalMs":1000`, msg)
}

// A task call's max clock bounds the whole wait, polling included: when it
// fires the client sends tasks/cancel and says the task may still
// complete.
func TestTaskMaxBoundsTheWholeWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var polls, cancels atomic.Int64
		c, _, _ := dialWith(t, nil, taskServer(func(n int) string { return workingWith(fmt.Sprint("step ", n)) }, &polls, &cancels))
		start := time.Now()
		_, err := c.CallToolTask(context.Background(), "long", nil, &client.CallOptions{Idle: time.Hour, Max: 10 * time.Second}, nil)
		var de *client.DeadlineError
		var ta *client.TaskAbandonedError
		if !errors.As(err, &de) || de.Clock != client.MaxClock || !errors.As(err, &ta) || time.Since(start) != 10*time.Second {
			t.Fatalf("after %v: %v; want the max deadline at 10s, the task abandoned", time.Since(start), err)
		}
		if cancels.Load() != 1 || ta.CancelErr != nil || ta.TaskID != "t1" || ta.Status != "working" ||
			!strings.Contains(err.Error(), "tasks/get") {
			t.Fatalf("%d tasks/cancel sent; error %v", cancels.Load(), err)
		}
	})
}

// A task call's idle clock is reset by news of the task (a new status
// message), not by a poll that finds nothing new.
func TestTaskIdleResetByStatusChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var polls, cancels atomic.Int64
		// The message changes on each of the first five polls, then never.
		c, _, _ := dialWith(t, nil, taskServer(func(n int) string { return workingWith(fmt.Sprint("step ", min(n, 5))) }, &polls, &cancels))
		_, err := c.CallToolTask(context.Background(), "long", nil, &client.CallOptions{Idle: 3 * time.Second, Max: time.Hour}, nil)
		var de *client.DeadlineError
		var ta *client.TaskAbandonedError
		if !errors.As(err, &de) || de.Clock != client.IdleClock || !errors.As(err, &ta) || cancels.Load() != 1 {
			t.Fatalf("%v (%d tasks/cancel); want the idle deadline, the task abandoned and cancelled", err, cancels.Load())
		}
		// Polls about a second apart: the fifth poll (the last news) is
		// followed by about three seconds of polls that find nothing new.
		if n := polls.Load(); n < 7 || n > 9 {
			t.Fatalf("%d polls before the idle deadline; want the last news at the 5th and about 3 s more", n)
		}
	})
}

// A response line past Options.MaxMessageBytes over stdio is read to its
// end and dropped, never held: the call it answers fails at once with a
// *ResponseTooLargeError, as over HTTP, rather than waiting out its clocks
// for the answer that came — with its id first or last in the line — and
// the connection goes on serving the next call.
func TestStdioResponseTooLarge(t *testing.T) {
	const limit = 4096
	synctest.Test(t, func(t *testing.T) {
		c, _, _ := dialWith(t, &client.Options{MaxMessageBytes: limit}, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method != mcp.MethodToolsCall {
				return
			}
			big := strings.Repeat("x", 4*limit)
			switch name(m) {
			case "id-first":
				f.send(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%q}]}}`, m.ID, big)
			case "id-last":
				f.send(`{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":%q}]},"id":%s}`, big, m.ID)
			default:
				result(f, m, "small")
			}
		})
		for _, tool := range []string{"id-first", "id-last"} {
			start := time.Now()
			_, err := c.CallTool(context.Background(), tool, nil, &client.CallOptions{Idle: time.Hour, Max: time.Hour})
			var tl *client.ResponseTooLargeError
			if !errors.As(err, &tl) || tl.Limit != limit {
				t.Fatalf("%s: %v; want a ResponseTooLargeError at %d bytes", tool, err, limit)
			}
			if took := time.Since(start); took != 0 {
				t.Fatalf("%s failed after %v; want at once", tool, took)
			}
		}
		res, err := c.CallTool(context.Background(), "small", nil, nil)
		if err != nil || res.IsError {
			t.Fatalf("the next call: %v %+v", err, res)
		}
	})
}

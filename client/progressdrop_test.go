package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// A callback slower than the server loses the oldest reports waiting for
// it, never the newest: when the call returns, its callback has seen the
// last value the server reported.
func TestSlowProgressCallbackSeesTheLatest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const reports = 100
		c, _ := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method != mcp.MethodToolsCall {
				return
			}
			for i := 1; i <= reports; i++ {
				progress(f, m, float64(i))
			}
			result(f, m, "done")
		})
		release := make(chan struct{})
		var seen []float64
		done := make(chan error, 1)
		go func() {
			_, err := c.CallTool(context.Background(), "slow", nil, &client.CallOptions{OnProgress: func(p client.Progress) {
				if len(seen) == 0 {
					<-release // the first report holds the callback while the rest arrive
				}
				seen = append(seen, p.Progress)
			}})
			done <- err
		}()
		synctest.Wait() // every report and the answer have been read
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(seen) < 2 || seen[len(seen)-1] != reports {
			t.Fatalf("the callback saw %v: want it to end with %d", seen, reports)
		}
		for i := 1; i < len(seen); i++ {
			if seen[i] <= seen[i-1] {
				t.Fatalf("the callback saw %v: not increasing", seen)
			}
		}
		if dropped := c.Stats().ProgressDropped; dropped == 0 || int(dropped)+len(seen) != reports {
			t.Errorf("%d reports seen and %d counted as dropped, of %d", len(seen), dropped, reports)
		}
	})
}

// A report for a call that asked for none (here over the call's own
// stream, with an empty token that matches its missing one) is counted
// and dropped: nothing waits for it, and the call still gets its answer.
func TestProgressForACallThatAskedForNone(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		m := readPosted(r)
		switch m.Method {
		case mcp.MethodDiscover:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}`, m.ID)
		case mcp.MethodToolsCall:
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"\",\"progress\":1}}\n\n")
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"resultType\":\"complete\",\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n", m.ID)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer hs.Close()
	c, err := client.DialHTTP(context.Background(), hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, "quiet", nil, nil)
	if err != nil || len(res.Content) != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
	if dropped := c.Stats().ProgressDropped; dropped != 1 {
		t.Errorf("%d reports counted as dropped, want 1", dropped)
	}
}

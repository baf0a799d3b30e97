package client_test

import (
	"context"
	"errors"
	"os"
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

// supervisorLog is what a Supervision's hooks were told.
type supervisorLog struct {
	mu    sync.Mutex
	downs []int // the failures in a row, per OnDown
	died  int   // OnDown with no error: the connection died
	ups   chan struct{}
}

// A supervised stdio server that dies is started again without waiting
// for a call: OnDown hears of the death, OnUp of the new connection, and
// calls then go to it. A call made while it is down fails at once as
// never sent, and starts nothing itself.
func TestSupervisionRestartsADeadServer(t *testing.T) {
	t.Setenv("MCPREL_CLIENT_TEST_SERVER", "1")
	log := &supervisorLog{ups: make(chan struct{}, 4)}
	gate := make(chan struct{}) // holds the first reconnection until a call has found it down
	var once sync.Once
	c, err := client.DialStdio(context.Background(), []string{os.Args[0]}, &client.Options{Supervise: &client.Supervision{
		Backoff: retry.Backoff{Base: time.Millisecond, Cap: 10 * time.Millisecond, Steady: true},
		OnDown: func(failures int, _ time.Duration, err error) {
			log.mu.Lock()
			log.downs = append(log.downs, failures)
			if err == nil {
				log.died++
			}
			log.mu.Unlock()
			once.Do(func() { <-gate })
		},
		OnUp: func(context.Context) { log.ups <- struct{}{} },
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.CallTool(ctx, "die", nil, nil); !errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("the call the server died in: %v, want ErrConnectionLost", err)
	}
	<-c.Done() // the dead connection's end, which the supervisor is waiting on
	_, err = c.CallTool(ctx, "echo", map[string]any{"n": 1}, nil)
	var ns *client.NotSentError
	if !errors.As(err, &ns) || client.VerdictOf(nil, err).Outcome != retry.OutcomeNotSent {
		t.Fatalf("a call while it is down: %v; want a *NotSentError, verdict not sent", err)
	}
	close(gate)
	select {
	case <-log.ups:
	case <-time.After(30 * time.Second):
		t.Fatal("the supervisor never reconnected")
	}
	if _, err := c.CallTool(ctx, "echo", map[string]any{"n": 2}, nil); err != nil {
		t.Fatalf("a call after the reconnection: %v", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.died != 1 || len(log.downs) != 1 || log.downs[0] != 1 {
		t.Fatalf("OnDown was told %v (%d deaths); want one death, the first failure", log.downs, log.died)
	}
	if st := c.Stats(); st.Restarts != 1 {
		t.Fatalf("%d restarts, want 1", st.Restarts)
	}
}

// Close stops the supervisor: the stream that Close ends is not taken for
// a dead one (no OnDown, no new stream), and the supervisor's goroutine
// exits — synctest.Test fails on one left blocked in its bubble.
func TestSupervisionEndsAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSSEServer(t, nil)
		downs := 0
		c, err := dialSSE(t, s, "http://127.0.0.1/sse", &client.Options{Supervise: &client.Supervision{
			Backoff: retry.Backoff{Base: time.Millisecond, Cap: time.Millisecond, Steady: true},
			OnDown:  func(int, time.Duration, error) { downs++ },
		}})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		time.Sleep(time.Second) // past any pause the supervisor could take (the bubble's clock)
		synctest.Wait()
		s.mu.Lock()
		streams := s.streams
		s.mu.Unlock()
		if downs != 0 || streams != 1 {
			t.Fatalf("after Close: %d OnDown calls and %d streams; want none and the first alone", downs, streams)
		}
	})
}

// A call made while a supervised restart is still negotiating with the
// new server is not sent to it: it fails at once as never sent, and the
// server sees no request before its handshake is done. Calls use the
// new connection once it is.
func TestSupervisionSendsNothingBeforeTheHandshake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := make(chan jsonrpc.Message, 4)
		s := newSSEServer(t, func(s *sseServer, m jsonrpc.Message) {
			if m.Method == mcp.MethodToolsCall {
				calls <- m
				s.answerText(m.ID, "done")
			}
		})
		s.initGate = make(chan struct{})
		ups := make(chan struct{}, 1)
		c, err := dialSSE(t, s, "http://127.0.0.1/sse", &client.Options{Supervise: &client.Supervision{
			Backoff: retry.Backoff{Base: time.Millisecond, Cap: time.Millisecond, Steady: true},
			OnUp:    func(context.Context) { ups <- struct{}{} },
		}})
		if err != nil {
			t.Fatal(err)
		}
		s.endStream()
		time.Sleep(time.Second) // past the supervisor's pause (the bubble's clock)
		synctest.Wait()         // it has opened a new stream and waits for initialize's answer
		_, err = c.CallTool(context.Background(), "echo", nil, nil)
		if v := client.VerdictOf(nil, err); v.Outcome != retry.OutcomeNotSent {
			t.Fatalf("a call during the new connection's handshake: %v (%v); want not sent", err, v.Outcome)
		}
		if got := strings.Join(s.methods(), ","); got != "initialize,notifications/initialized,initialize" {
			t.Fatalf("the server saw %s; want nothing after the new initialize until it is answered", got)
		}
		close(s.initGate)
		<-ups
		res, err := c.CallTool(context.Background(), "echo", nil, nil)
		if err != nil || textOf(t, res) != "done" {
			t.Fatalf("a call after the reconnection: %+v, %v", res, err)
		}
		if last := s.seen()[len(s.seen())-1].target; last != "/message?sessionId=s2" {
			t.Fatalf("the call went to %s; want the new session", last)
		}
	})
}

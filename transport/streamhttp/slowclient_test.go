package streamhttp_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// modernList is a complete 2026-07-28 tools/list request: its headers and
// a body padded with spaces (valid JSON) to size bytes.
func modernList(size int) (head, body string) {
	b := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	b += strings.Repeat(" ", max(0, size-len(b)))
	head = "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
		"Mcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n"
	return head, b
}

// servePipe serves a handler with opts, over a fresh server, on an
// in-memory network (for a synctest bubble), until the test ends.
func servePipe(t *testing.T, opts *streamhttp.HandlerOptions) *mcptest.PipeNetwork {
	t.Helper()
	h, err := streamhttp.NewHandler(mcptest.NewServer(t, nil), opts)
	if err != nil {
		t.Fatal(err)
	}
	ln := mcptest.NewPipeNetwork()
	hs := &http.Server{Handler: h}
	go hs.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		h.Shutdown(ctx)
		hs.Shutdown(ctx)
		ln.Close()
	})
	return ln
}

// A body that does not arrive (headers declaring 4 MB, one byte, then
// nothing) or arrives too slowly (a byte every half second) gets 408 once
// the grace and the minimum rate run out, and its connection is closed; a
// slow body within the rate is served. On fake time.
func TestSlowBodies(t *testing.T) {
	const grace, rate = time.Second, 1000 // bytes a second
	for _, tc := range []struct {
		name    string
		size    int           // the body's declared size
		chunk   int           // bytes sent at a time
		every   time.Duration // pause between chunks
		sendAll bool          // false: stop after the first chunk
		want    string        // status line start
		within  time.Duration // when the answer must have come
	}{
		{"declares 4 MB, sends a byte", 4_000_000, 1, 0, false, "HTTP/1.1 408", grace + time.Millisecond + time.Millisecond},
		{"trickles a byte every half second", 10_000, 1, 500 * time.Millisecond, true, "HTTP/1.1 408", grace + 10*time.Millisecond},
		{"slow but within the rate", 4000, 200, 100 * time.Millisecond, true, "HTTP/1.1 200", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ln := servePipe(t, &streamhttp.HandlerOptions{BodyTimeout: grace, MinBodyRate: rate})
				conn, err := ln.DialContext(context.Background(), "tcp", "")
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				head, body := modernList(tc.size)
				start := time.Now()
				sent := make(chan struct{})
				go func() {
					defer close(sent)
					if _, err := io.WriteString(conn, head); err != nil {
						return
					}
					for i := 0; i < len(body); i += tc.chunk {
						if _, err := io.WriteString(conn, body[i:min(i+tc.chunk, len(body))]); err != nil || !tc.sendAll {
							return
						}
						time.Sleep(tc.every) // the client's own pace, on fake time
					}
				}()
				status, err := bufio.NewReader(conn).ReadString('\n')
				took := time.Since(start)
				if err != nil || !strings.HasPrefix(status, tc.want) {
					t.Fatalf("answer %q (%v) after %v, want %s", status, err, took, tc.want)
				}
				if took > tc.within {
					t.Fatalf("answered after %v, want within %v", took, tc.within)
				}
				if tc.want == "HTTP/1.1 408" {
					// The connection is closed: nothing more to read.
					if _, err := io.Copy(io.Discard, conn); err != nil {
						t.Fatalf("reading the rest: %v", err)
					}
				}
				conn.Close()
				<-sent
			})
		})
	}
}

// A flood of idle connections is capped: past MaxConns (or MaxConnsPerHost
// from one address) a new connection is answered at once with 503 and
// Retry-After, and once the flood goes away a client is served again. On a
// real loopback listener, with small caps.
func TestConnectionCaps(t *testing.T) {
	for _, tc := range []struct {
		name            string
		maxConns, perIP int
		held            int // idle connections the flood keeps open
	}{
		{"server-wide", 6, 100, 6},
		{"per remote address", 100, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			h, err := streamhttp.NewHandler(srv, nil)
			if err != nil {
				t.Fatal(err)
			}
			tcp, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ln := streamhttp.LimitListener(tcp, &streamhttp.ListenerOptions{MaxConns: tc.maxConns, MaxConnsPerHost: tc.perIP})
			hs := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
			go hs.Serve(ln)
			t.Cleanup(func() { hs.Close(); h.Shutdown(context.Background()) })
			addr := tcp.Addr().String()

			var flood []net.Conn
			for range tc.held {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				flood = append(flood, c)
			}
			waitFor(t, "the flood to be accepted", func() bool { return ln.Stats().Open == tc.held })

			extra, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			extra.SetDeadline(time.Now().Add(mcptest.Timeout))
			head, body := modernList(0)
			io.WriteString(extra, head+body)
			resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
			if err != nil {
				t.Fatalf("the connection past the cap: %v", err)
			}
			resp.Body.Close()
			extra.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
				t.Fatalf("the connection past the cap got %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if st := ln.Stats(); st.Shed != 1 || st.Open != tc.held {
				t.Fatalf("stats %+v, want %d open and 1 shed", st, tc.held)
			}

			for _, c := range flood {
				c.Close()
			}
			waitFor(t, "the flood's connections to close", func() bool { return ln.Stats().Open == 0 })
			c := mcptest.HTTPClient{URL: "http://" + addr + "/", Client: &http.Client{}}
			c.SetT(t)
			if f := mcptest.ReadJSON(t, c.Modern(context.Background(), 2, mcp.MethodToolsList, nil)); f.Error != nil {
				t.Fatalf("after the flood: %s", f.Raw)
			}
		})
	}
}

// waitFor polls cond, which another process's sockets decide, until it
// holds; mcptest.Timeout is only the safety net.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(mcptest.Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Bodies being read are bounded in bytes: a body stalled halfway holds the
// bytes it sent, a request that does not fit beside it gets 503 (or 429,
// for a tenant past its share) with Retry-After — fully read, so its
// client sees the answer, not a reset — another tenant still fits, and once
// the stalled body times out its bytes are free again. On fake time.
func TestBodiesBeingReadAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := servePipe(t, &streamhttp.HandlerOptions{
			Tokens:          map[string]string{"tok-a": "alice", "tok-b": "bob"},
			MaxReadingBytes: 128 << 10, MaxReadingBytesPerTenant: 80 << 10,
			BodyTimeout: time.Second, MinBodyRate: 1 << 10,
		})
		send := func(token string, size, stopAt int) (status chan string) {
			status = make(chan string, 1)
			conn, err := ln.DialContext(context.Background(), "tcp", "")
			if err != nil {
				t.Fatal(err)
			}
			head, body := modernList(size)
			head = strings.Replace(head, "\r\n\r\n", "\r\nAuthorization: Bearer "+token+"\r\n\r\n", 1)
			go io.WriteString(conn, head+body[:stopAt]) // the rest, if any, never comes
			go func() {
				defer conn.Close()
				line, _ := bufio.NewReader(conn).ReadString('\n')
				status <- line
			}()
			return status
		}
		// alice stalls halfway through 80 KiB: her body's buffer has grown
		// to 64 KiB, which she holds.
		stalled := send("tok-a", 80<<10, 40<<10)
		synctest.Wait()
		// Her next 30 KiB does not fit in her 80 KiB share.
		if got := <-send("tok-a", 30<<10, 30<<10); !strings.HasPrefix(got, "HTTP/1.1 429") {
			t.Fatalf("alice's second body: %q, want 429", got)
		}
		// bob's 30 KiB fits in the server's 128 KiB; his 70 KiB does not.
		if got := <-send("tok-b", 30<<10, 30<<10); !strings.HasPrefix(got, "HTTP/1.1 200") {
			t.Fatalf("bob's body beside alice's: %q, want 200", got)
		}
		if got := <-send("tok-b", 70<<10, 70<<10); !strings.HasPrefix(got, "HTTP/1.1 503") {
			t.Fatalf("bob's body past the server's bound: %q, want 503", got)
		}
		// alice's stalled body times out and gives her bytes back.
		if got := <-stalled; !strings.HasPrefix(got, "HTTP/1.1 408") {
			t.Fatalf("the stalled body: %q, want 408", got)
		}
		if got := <-send("tok-b", 70<<10, 70<<10); !strings.HasPrefix(got, "HTTP/1.1 200") {
			t.Fatalf("bob's large body once the stall ended: %q, want 200", got)
		}
	})
}

package streamhttp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// idleN is how many idle connections, or sessions, BenchmarkIdleMemory
// holds at once.
const idleN = 10_000

// connectionsFor is how many connections the open-file limit lets this
// process hold with both their ends (two descriptors each), up to idleN.
func connectionsFor(b *testing.B) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	n := min(idleN, (int(lim.Cur)-200)/2)
	if n < 1000 {
		b.Skipf("the open-file limit (%d) allows %d connections; raise it", lim.Cur, n)
	}
	return n
}

// BenchmarkIdleMemory measures what a server holds for clients that do
// nothing, in heap and goroutine stacks after a collection, per client:
//
//	connections  a keep-alive HTTP connection that made one 2026-07-28
//	             request (tools/list) and then sits idle, both ends in this
//	             process: the client end is a bare net.Conn
//	tcp          the same number of bare TCP connections, both ends, to
//	             a listener that only accepts: what a connection costs
//	             before HTTP, to subtract from the line above
//	sessions     a 2025-11-25 session, initialized and then idle, made
//	             without a connection (the handler called directly)
//
// It holds idleN of each; run it with
//
//	go test -run '^$' -bench IdleMemory -benchtime 1x ./transport/streamhttp
//
// (the open-file limit must allow 2×idleN descriptors).
func BenchmarkIdleMemory(b *testing.B) {
	b.Run("connections", func(b *testing.B) {
		h := idleHandler(b, nil)
		hs := httptest.NewServer(h)
		defer hs.Close()
		addr := strings.TrimPrefix(hs.URL, "http://")
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"` + mcp.MetaProtocolVersion + `":"` + mcp.Version20260728 + `","` + mcp.MetaClientCapabilities + `":{}}}}`
		req := "POST /mcp HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
			mcp.HeaderMethod + ": tools/list\r\n" + mcp.HeaderProtocolVersion + ": " + mcp.Version20260728 + "\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
		measureIdle(b, connectionsFor(b), "B/connection", func() io.Closer {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.WriteString(c, req); err != nil {
				b.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				b.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				msg, _ := io.ReadAll(resp.Body)
				b.Fatalf("tools/list: HTTP %d: %s", resp.StatusCode, msg)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("tools/list: HTTP %d", resp.StatusCode)
			}

			return c
		})
	})
	b.Run("tcp", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		accepted := make(chan net.Conn, idleN)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
		defer func() {
			ln.Close()
			for len(accepted) > 0 {
				(<-accepted).Close()
			}
		}()
		measureIdle(b, connectionsFor(b), "B/connection", func() io.Closer {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			return c
		})
	})
	b.Run("sessions", func(b *testing.B) {
		h := idleHandler(b, &streamhttp.HandlerOptions{MaxSessions: idleN, MaxSessionsPerTenant: idleN})
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"idle","version":"1"}}}`
		measureIdle(b, idleN, "B/session", func() io.Closer {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(init))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Accept", "application/json, text/event-stream")
			h.ServeHTTP(w, r)
			sid := w.Header().Get(mcp.HeaderSessionID)
			if w.Code != http.StatusOK || sid == "" {
				b.Fatalf("initialize: HTTP %d, session %q: %s", w.Code, sid, w.Body)
			}
			w = httptest.NewRecorder()
			r = httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Accept", "application/json, text/event-stream")
			r.Header.Set(mcp.HeaderSessionID, sid)
			r.Header.Set(mcp.HeaderProtocolVersion, "2025-11-25")
			h.ServeHTTP(w, r)
			if w.Code != http.StatusAccepted {
				b.Fatalf("notifications/initialized: HTTP %d: %s", w.Code, w.Body)
			}
			return io.NopCloser(nil)
		})
	})
}

func idleHandler(b *testing.B, opts *streamhttp.HandlerOptions) *streamhttp.Handler {
	srv, err := server.New(mcp.Implementation{Name: "idle", Version: "1"}, &server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Shutdown(context.Background()) })
	return h
}

// measureIdle makes n clients with open, reports the heap and stack in
// use after they were made, less before, per client, and closes them.
func measureIdle(b *testing.B, n int, unit string, open func() io.Closer) {
	for b.Loop() {
		before := inUse()
		held := make([]io.Closer, 0, n)
		for range n {
			held = append(held, open())
		}
		after := inUse()
		b.ReportMetric(float64(after-before)/float64(n), unit)
		b.ReportMetric(float64(n), "clients")
		for _, c := range held {
			c.Close()
		}
	}
}

// inUse is the heap and goroutine stacks in use after a collection.
func inUse() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

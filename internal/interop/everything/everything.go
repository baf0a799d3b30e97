// Package everything starts the reference MCP server
// @modelcontextprotocol/server-everything, pinned by package.json and
// package-lock.json in this directory (`npm ci` here installs it), for the
// tests that check mcprel against software it did not write: the client's
// transports here, the gateway's upstreams later. The server speaks stdio,
// Streamable HTTP, and the 2024-11-05 HTTP+SSE transport that many
// deployed servers still speak only.
//
// Without Node or without node_modules here, Require skips the test, or
// fails it under MCPREL_REQUIRE_INTEROP=1 (as `make test` sets).
package everything

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Mode is the transport the server speaks: its command-line argument.
type Mode string

// The server's transports.
const (
	Stdio          Mode = "stdio"
	SSE            Mode = "sse"            // GET /sse, POSTs to the endpoint it names
	StreamableHTTP Mode = "streamableHttp" // /mcp
)

// readyWithin bounds the wait for a started server to accept connections;
// it usually does within a second.
const readyWithin = 30 * time.Second

// dir is this directory, wherever the calling test runs from.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// entry is the server's script.
func entry() string {
	return filepath.Join(dir(), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}

// Require skips t, or fails it under MCPREL_REQUIRE_INTEROP=1, unless
// node is on PATH and the server is installed here.
func Require(t testing.TB) {
	t.Helper()
	why := ""
	if _, err := exec.LookPath("node"); err != nil {
		why = "node is not on PATH: install Node 20+ and run `npm ci` in internal/interop/everything"
	} else if _, err := os.Stat(entry()); err != nil {
		why = "internal/interop/everything/node_modules is missing: run `npm ci` in internal/interop/everything"
	}
	if why == "" {
		return
	}
	if os.Getenv("MCPREL_REQUIRE_INTEROP") == "1" {
		t.Fatal(why + " (MCPREL_REQUIRE_INTEROP=1)")
	}
	t.Skip(why)
}

// Command is the command line that starts the server over stdio, for
// client.DialStdio or a gateway's upstream. It calls Require.
func Command(t testing.TB) []string {
	t.Helper()
	Require(t)
	return []string{"node", entry(), string(Stdio)}
}

// Start starts the server in mode SSE or StreamableHTTP on a free
// loopback port and returns the URL a client dials: http://127.0.0.1:PORT
// /sse or /mcp. It returns once the port accepts connections, and the
// server is stopped when t ends; what it wrote on stderr is logged if t
// failed. It calls Require.
func Start(t testing.TB, mode Mode) string {
	t.Helper()
	Require(t)
	path := map[Mode]string{SSE: "/sse", StreamableHTTP: "/mcp"}[mode]
	if path == "" {
		t.Fatalf("everything.Start: mode %q is not an HTTP one (use Command for stdio)", mode)
	}
	port := freePort(t)
	cmd := exec.Command("node", entry(), string(mode))
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting server-everything: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("server-everything %s wrote on stderr:\n%s", mode, stderr.String())
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(readyWithin)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return "http://" + addr + path
		}
		select {
		case <-exited:
			t.Fatalf("server-everything %s exited before it listened on %s:\n%s", mode, addr, stderr.String())
		case <-time.After(20 * time.Millisecond): // the next poll of the port
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything %s did not listen on %s within %v:\n%s", mode, addr, readyWithin, stderr.String())
		}
	}
}

// freePort is a loopback port nothing listens on now. The server binds it
// a moment later; another process taking it in between makes Start fail
// with the server's "already in use", not hang.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a stderr the process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil // enough to tell what went wrong
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

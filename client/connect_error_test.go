package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// A connection that cannot be opened is a *ConnectError that says so in
// one line naming the client once, not a lost connection: the request
// never left, and the era fallback does not ask the same address again.
func TestDialRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	_, err = client.DialHTTP(context.Background(), url, nil)
	var ce *client.ConnectError
	if !errors.As(err, &ce) || !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("err %v (%T), want a *ConnectError wrapping ECONNREFUSED", err, err)
	}
	if want := "client: could not connect to " + url + ": connection refused"; err.Error() != want {
		t.Fatalf("err %q, want %q", err, want)
	}
	// The 2025 handshake given up front: its context, the client named once.
	_, err = client.DialHTTP(context.Background(), url, &client.Options{Era: mcp.Legacy})
	if err == nil || strings.Count(err.Error(), "client:") != 1 {
		t.Fatalf("err %v, want the client named once", err)
	}
}

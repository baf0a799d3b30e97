package main

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"io"
	"strings"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// reconcileError ends a call whose outcome is unknown and that may not be
// retried blindly: the server may have acted on it.
type reconcileError struct{ msg string }

func (e *reconcileError) Error() string { return e.msg }

// newKey returns a fresh idempotency key: 128 random bits.
func newKey() string {
	var b [16]byte
	rand.Read(b[:])
	return "k-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// callWithRetries makes one call (retries are added with the retry
// package).
func callWithRetries(ctx context.Context, c *client.Client, name string, args map[string]any, o *client.CallOptions, retries int, stderr io.Writer) (*mcp.CallToolResult, error) {
	return c.CallTool(ctx, name, args, o)
}

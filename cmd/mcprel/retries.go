package main

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// newKey returns a fresh idempotency key: 128 random bits.
func newKey() string {
	var b [16]byte
	rand.Read(b[:])
	return "k-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// retryPolicy is how "mcprel call" decides retries: the class the user
// gives, else (with --trust-server) the server's word, else conditional
// for a call with a key and unsafe without.
type retryPolicy struct {
	class       string // "", "safe", "conditional", "unsafe"
	trustServer bool
	attempts    int               // the first included
	observe     func(retry.Event) // the client metrics, or nil
}

// callWithRetries makes the call with the client's retry loop
// (client.CallToolWithRetries), planned by the command's flags, telling
// stderr of every retry, and adds to a failure what the user may do next.
func callWithRetries(ctx context.Context, c *client.Client, tool *mcp.Tool, name string, args map[string]any, o *client.CallOptions, p retryPolicy, stderr io.Writer) (*mcp.CallToolResult, error) {
	table := retry.Table{TrustServer: p.trustServer}
	_, hasKey := args[mcp.ArgIdempotencyKey]
	switch {
	case p.class != "":
		cl, ok := mcp.ParseRetryClass(p.class)
		if !ok {
			return nil, usagef("call: --class must be safe, conditional or unsafe, not %q", p.class)
		}
		table.Tools = map[string]retry.Rule{name: {Class: cl}}
	case !p.trustServer && hasKey:
		// The user gave a key: the tool deduplicates by it.
		table.Tools = map[string]retry.Rule{name: {Class: mcp.RetryConditional}}
	}
	observe := func(e retry.Event) {
		if p.observe != nil {
			p.observe(e)
		}
		if e.Decision.Retry {
			fmt.Fprintf(stderr, "mcprel call: attempt %d failed (%s); retrying in %v with a new request id%s\n",
				e.Attempt, e.Failure, e.Decision.Delay.Round(time.Millisecond), map[bool]string{true: " and the same idempotency key", false: ""}[e.Decision.SameKey])
		}
	}
	planner := retry.NewPlanner(retry.Options{Table: table, MaxAttempts: p.attempts, Observe: observe})
	res, err := c.CallToolWithRetries(ctx, name, args, o, &client.Retries{Planner: planner, Tool: tool})
	var rec *retry.ReconcileError
	switch {
	case errors.As(err, &rec):
		if adv, ok := advertisedSafe(tool); ok && p.class == "" {
			// "Read the state it changes" is no advice for a tool the
			// server says changes nothing; its word is a hint, so it is
			// given as the server's.
			return nil, &reconcileError{msg: fmt.Sprintf("%v. The server advertises tool %q as safe to retry (%s): calling it again does no harm if you trust the server; mcprel call did not, because the server's word counts only with --trust-server",
				strings.TrimPrefix(rec.Cause.Error(), "client: "), name, adv), cause: rec.Cause}
		}
		return nil, &reconcileError{msg: rec.Error(), cause: rec.Cause}
	case err != nil:
		return nil, withRetryAdvice(err, name, table.Rule(name, tool).Class, args)
	}
	return res, nil
}

// advertisedSafe reports whether the server lists tool as safe to retry,
// and by which claim: mcprel's retry class in _meta, or the annotations.
func advertisedSafe(tool *mcp.Tool) (string, bool) {
	if tool == nil {
		return "", false
	}
	if c, ok := retry.ServerClass(tool); !ok || c != mcp.RetrySafe {
		return "", false
	}
	if s, ok := tool.Meta[mcp.MetaRetryClass].(string); ok {
		return fmt.Sprintf("%s %q", mcp.MetaRetryClass, s), true
	}
	return "readOnlyHint or idempotentHint", true
}

// withRetryAdvice adds to a failure whose outcome is unknown (a deadline,
// a lost connection, an HTTP 503) what may be done next, by the class the
// call was planned by: a safe call may simply be made again, a
// conditional one with the same idempotency key. (An unsafe one ends in a
// reconcileError instead, which says to find out first.)
func withRetryAdvice(err error, name string, class mcp.RetryClass, args map[string]any) error {
	if client.VerdictOf(nil, err).Outcome != retry.OutcomeUnknown {
		return err
	}
	switch key, _ := args[mcp.ArgIdempotencyKey].(string); {
	case class == mcp.RetrySafe:
		return &advisedError{err, fmt.Sprintf("tool %q is safe to retry: calling it again does no harm", name)}
	case class == mcp.RetryConditional && key != "":
		return &advisedError{err, fmt.Sprintf("calling tool %q again is safe with the same arguments and idempotency key (--idempotency-key %s): the server runs it at most once", name, key)}
	}
	return err
}

// advisedError is a failure with advice on what to do next.
type advisedError struct {
	err    error
	advice string
}

func (e *advisedError) Error() string { return e.err.Error() + "; " + e.advice }
func (e *advisedError) Unwrap() error { return e.err }

// reconcileError ends a call whose outcome is unknown and that may not be
// retried blindly: the server may have acted on it.
// Its cause (a deadline, a lost connection) stays reachable for the exit
// status.
type reconcileError struct {
	msg   string
	cause error
}

func (e *reconcileError) Error() string { return e.msg }
func (e *reconcileError) Unwrap() error { return e.cause }

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

// callWithRetries makes a call, and makes it again when the retry rules
// allow: with a new JSON-RPC id, the same arguments (and so the same
// idempotency key), after a jittered backoff that never outlives the
// maximum deadline. An unsafe call whose outcome is unknown is never
// repeated: the error says to reconcile first.
func callWithRetries(ctx context.Context, c *client.Client, tool *mcp.Tool, name string, args map[string]any, o *client.CallOptions, p retryPolicy, stderr io.Writer) (*mcp.CallToolResult, error) {
	table := retry.Table{TrustServer: p.trustServer}
	_, hasKey := args[mcp.ArgIdempotencyKey]
	switch {
	case p.class != "":
		cl, ok := retry.ParseClass(p.class)
		if !ok {
			return nil, usagef("call: --class must be safe, conditional or unsafe, not %q", p.class)
		}
		table.Tools = map[string]retry.Rule{name: {Class: cl}}
	case !p.trustServer && hasKey:
		// The user gave a key: the tool deduplicates by it.
		table.Tools = map[string]retry.Rule{name: {Class: retry.Conditional}}
	}
	planner := retry.NewPlanner(retry.Options{Table: table, MaxAttempts: p.attempts, Observe: p.observe})
	attempts := planner.Start(retry.Call{Tool: name, Advertised: tool, HasIdempotencyKey: hasKey, Deadline: time.Now().Add(o.Max)})
	for {
		res, err := c.CallTool(ctx, name, args, o)
		var f retry.Failure
		switch {
		case err == nil && !res.IsError:
			return res, nil
		case err == nil:
			var ok bool
			if f, ok = retry.FromResult(res); !ok {
				return res, nil
			}
		default:
			f = failureOf(err)
		}
		if ctx.Err() != nil {
			return res, err // the user cancelled: no retry
		}
		d := attempts.Next(f, time.Now())
		if !d.Retry {
			var rec *retry.ReconcileError
			if errors.As(d.Err, &rec) {
				return nil, &reconcileError{msg: rec.Error(), cause: err}
			}
			if err == nil {
				return res, nil // the tool's failure stands
			}
			return nil, err
		}
		fmt.Fprintf(stderr, "mcprel call: attempt %d failed (%s); retrying in %v with a new request id%s\n",
			attempts.Count(), f.Kind, d.Delay.Round(time.Millisecond), map[bool]string{true: " and the same idempotency key", false: ""}[d.SameKey])
		timer := time.NewTimer(d.Delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, &client.CancelledError{Cause: context.Cause(ctx)}
		case <-timer.C:
		}
	}
}

// failureOf says what a failed attempt was, as far as the client knows.
func failureOf(err error) retry.Failure {
	var de *client.DeadlineError
	var se *client.StatusError
	switch {
	case errors.As(err, &de) && de.Clock == client.IdleClock:
		return retry.Failure{Kind: retry.IdleTimeout, Err: err}
	case errors.As(err, &de):
		return retry.Failure{Kind: retry.MaxTimeout, Err: err}
	case errors.As(err, &se) && (se.Status == 429 || se.Status == 503):
		f := retry.Failure{Kind: retry.Overloaded, Err: err}
		if d, ok := retry.ParseRetryAfter(se.RetryAfter, time.Now()); ok {
			f.RetryAfter = d
		}
		return f
	}
	return retry.Classify(err)
}

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

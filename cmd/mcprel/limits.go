package main

import (
	"flag"
	"math"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// limitFlags are the flags that bound what calls may hold: server-wide,
// and per tenant when --token names tenants.
type limitFlags struct {
	maxConcurrent, maxQueued, maxMessage int
	maxBytes                             int64
	maxConns, maxConnsPerHost            int

	tenantConcurrent, tenantQueued int
	tenantBytes                    int64
	tenantRate                     float64
	tenantBurst                    int
	tenantSessions, tenantListens  int
}

func (f *limitFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.maxConcurrent, "max-concurrent", server.DefaultMaxConcurrentCalls, "tool calls that may run at once (at least 1)")
	fs.IntVar(&f.maxQueued, "max-queued", server.DefaultMaxQueuedCalls, "calls that may wait for a slot before new ones are refused as overloaded (at least 1)")
	fs.IntVar(&f.maxMessage, "max-message-bytes", jsonrpc.DefaultMaxMessageBytes, "largest inbound message accepted")
	fs.Int64Var(&f.maxBytes, "max-inflight-bytes", server.DefaultMaxInflightBytes, "bytes the requests of running and queued calls may hold in all; past it calls are refused as overloaded (at least --max-message-bytes)")
	fs.IntVar(&f.maxConns, "max-conns", 0, "HTTP connections open at once; past it a new one is answered 503 (default 4096, or 3/4 of the open-file limit if lower)")
	fs.IntVar(&f.maxConnsPerHost, "max-conns-per-host", 0, "HTTP connections open at once from one remote address (default a quarter of --max-conns)")
	fs.IntVar(&f.tenantConcurrent, "tenant-max-concurrent", 0, "with --token: calls one tenant may run at once (default a quarter of --max-concurrent)")
	fs.IntVar(&f.tenantQueued, "tenant-max-queued", 0, "with --token: calls one tenant may have waiting (default a quarter of --max-queued)")
	fs.Int64Var(&f.tenantBytes, "tenant-max-bytes", 0, "with --token: bytes one tenant's running and queued calls may hold (default a quarter of --max-inflight-bytes, at least --max-message-bytes)")
	fs.Float64Var(&f.tenantRate, "tenant-rate", 0, "with --token: calls a second one tenant may make, sustained (default no rate limit)")
	fs.IntVar(&f.tenantBurst, "tenant-burst", 0, "with --tenant-rate: calls one tenant may make at once (default the rate, at least 1)")
	fs.IntVar(&f.tenantSessions, "tenant-max-sessions", 0, "2025-era HTTP sessions one tenant may hold (default 256, a quarter of the server's 1024)")
	fs.IntVar(&f.tenantListens, "tenant-max-listens", server.DefaultMaxSubscriptions, "subscriptions/listen streams one tenant may hold open")
}

// check validates the limits, naming each flag as typed, in messages of
// command cmd.
func (f *limitFlags) check(cmd string) error {
	for _, c := range []struct {
		flag  string
		value int64
	}{{"--max-concurrent", int64(f.maxConcurrent)}, {"--max-queued", int64(f.maxQueued)}, {"--max-message-bytes", int64(f.maxMessage)},
		{"--max-inflight-bytes", f.maxBytes}, {"--tenant-max-listens", int64(f.tenantListens)}} {
		if c.value < 1 {
			return usagef("%s: %s must be at least 1, not %d", cmd, c.flag, c.value)
		}
	}
	for _, c := range []struct {
		flag  string
		value float64
	}{{"--max-conns", float64(f.maxConns)}, {"--max-conns-per-host", float64(f.maxConnsPerHost)},
		{"--tenant-max-concurrent", float64(f.tenantConcurrent)}, {"--tenant-max-queued", float64(f.tenantQueued)},
		{"--tenant-max-bytes", float64(f.tenantBytes)}, {"--tenant-rate", f.tenantRate}, {"--tenant-burst", float64(f.tenantBurst)},
		{"--tenant-max-sessions", float64(f.tenantSessions)}} {
		if c.value < 0 || math.IsNaN(c.value) || math.IsInf(c.value, 0) {
			return usagef("%s: %s must not be negative, not %v", cmd, c.flag, c.value)
		}
	}
	if f.maxBytes < int64(f.maxMessage) {
		return usagef("%s: --max-inflight-bytes (%d) must be at least --max-message-bytes (%d), or the largest messages could never run", cmd, f.maxBytes, f.maxMessage)
	}
	if f.tenantBytes != 0 && f.tenantBytes < int64(f.maxMessage) {
		return usagef("%s: --tenant-max-bytes (%d) must be at least --max-message-bytes (%d)", cmd, f.tenantBytes, f.maxMessage)
	}
	return nil
}

// apply sets the server's limits in o; tenants says whether tokens name
// tenants, which is when per-tenant limits apply.
func (f *limitFlags) apply(o *server.Options, tenants bool) {
	o.MaxConcurrentCalls = f.maxConcurrent
	o.MaxQueuedCalls = f.maxQueued
	o.MaxInflightBytes = f.maxBytes
	o.MaxSubscriptions = f.tenantListens
	if !tenants {
		return
	}
	o.Tenant = server.Limits{
		MaxConcurrent: or(f.tenantConcurrent, max(1, f.maxConcurrent/4)),
		MaxQueued:     or(f.tenantQueued, max(1, f.maxQueued/4)),
		MaxBytes:      or(f.tenantBytes, max(int64(f.maxMessage), f.maxBytes/4)),
		Rate:          f.tenantRate,
		Burst:         or(f.tenantBurst, max(1, int(math.Ceil(f.tenantRate)))),
	}
}

// applyHTTP sets the HTTP transport's limits.
func (f *limitFlags) applyHTTP(h *streamhttp.HandlerOptions) *streamhttp.ListenerOptions {
	h.MaxBodyBytes = int64(f.maxMessage)
	h.MaxSessionsPerTenant = f.tenantSessions
	return &streamhttp.ListenerOptions{MaxConns: f.maxConns, MaxConnsPerHost: f.maxConnsPerHost}
}

// or is v, or def when v is zero.
func or[T int | int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

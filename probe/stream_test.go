package probe_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/mcprel/mcprel/probe"
)

// statuses is each result's status, by "fixture era".
func statuses(rep *probe.Report) map[string]probe.Status {
	out := map[string]probe.Status{}
	for _, r := range rep.Results {
		out[fmt.Sprintf("%d %s", r.Fixture, r.Era)] = r.Status
	}
	return out
}

// Nothing to check is not applicable, never passed, and an acknowledged
// stream is one that stays open. A server that answers everything with
// JSON — subscriptions/listen with {} at once — gives the SSE fixture
// nothing to check, and fails the reconnect fixture; one that
// acknowledges a listen and closes it fails both (no keepalive came on
// the quiet stream, and the stream did not stay open); one that holds it
// open with keepalives passes both.
func TestNothingToCheckIsNoPass(t *testing.T) {
	const modern, legacy = "2026-07-28", "2025-11-25"
	for _, tc := range []struct {
		name string
		fake *httpFake
		want map[string]probe.Status
	}{
		{"JSON only", &httpFake{}, map[string]probe.Status{
			"10 " + modern: probe.NotApplicable, "10 " + legacy: probe.NotApplicable,
			"11 " + modern: probe.Failed, "11 " + legacy: probe.NotApplicable}},
		{"listen acknowledged and closed", &httpFake{listen: "ack-close"}, map[string]probe.Status{
			"10 " + modern: probe.Failed, "10 " + legacy: probe.NotApplicable,
			"11 " + modern: probe.Failed, "11 " + legacy: probe.NotApplicable}},
		{"listen held open", &httpFake{listen: "stream", keepalive: 50 * time.Millisecond}, map[string]probe.Status{
			"10 " + modern: probe.Passed, "10 " + legacy: probe.NotApplicable,
			"11 " + modern: probe.Passed, "11 " + legacy: probe.NotApplicable}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			timing := fastTiming
			timing.Keepalive = 2 * time.Second
			rep, err := probe.Run(context.Background(), &probe.Options{Target: probe.Target{URL: tc.fake.start(t)}, Timing: timing, Only: []int{10, 11}})
			must(t, err)
			for _, r := range rep.Results {
				t.Logf("%2d %s %s: %s", r.Fixture, r.Era, r.Status, r.Detail)
			}
			got := statuses(rep)
			for _, k := range slices.Sorted(maps.Keys(tc.want)) {
				if got[k] != tc.want[k] {
					t.Errorf("fixture %s: %s, want %s", k, got[k], tc.want[k])
				}
			}
		})
	}
}

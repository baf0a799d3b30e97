package probe_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/probe"
	"github.com/mcprel/mcprel/review"
)

// A stdio server that exits while a fixture speaks to it died during that
// fixture: the fixture fails saying so — its exit status, what it wrote
// on stderr — rather than blaming what the fixture was waiting for.
func TestAStdioServerThatExitsDiedDuringItsFixture(t *testing.T) {
	rep := probeFakeOnly(t, "dies-on-stall", 6)
	for _, r := range rep.Results {
		t.Logf("%2d %s %s: %s", r.Fixture, r.Era, r.Status, r.Detail)
		if r.Status != probe.Failed || !strings.HasPrefix(r.Detail, "the server died during this fixture") ||
			!strings.Contains(r.Detail, "exit status 3") || !strings.Contains(r.Detail, "more than this server takes") {
			t.Errorf("fixture %d (%s) does not say the server exited, how, and what it wrote on stderr", r.Fixture, r.Era)
		}
	}
	if len(rep.Deaths) != 2 {
		t.Fatalf("the report tells of %d deaths, want one per era's fixture 6: %v", len(rep.Deaths), rep.Deaths)
	}
	for _, d := range rep.Deaths {
		if len(d.During) != 1 || !strings.HasPrefix(d.During[0], "6 deadlines (") {
			t.Errorf("a death during %v, want during fixture 6 alone", d.During)
		}
	}
}

// An HTTP server that stops taking connections mid-run died then: the
// fixtures running say so, naming each other, rather than failing for
// what they were waiting on (a keepalive that would never come).
func TestAnHTTPServerThatStopsTakingConnectionsDied(t *testing.T) {
	fake := &httpFake{noLegacy: true, listen: "stream", crashOn: "crash", tools: []string{"crash"}}
	pol, err := review.Parse("crash.yaml", []byte("operations:\n  - name: crash\n    semantics: {kind: read-only}\n    probe: {call: true, stall_arguments: {}}\n"))
	must(t, err)
	rep, err := probe.Run(context.Background(), &probe.Options{Target: probe.Target{URL: fake.start(t)}, Policy: pol, Timing: fastTiming, Only: []int{6, 10}})
	must(t, err)
	for _, r := range rep.Results {
		t.Logf("%2d %s %s (%v): %s", r.Fixture, r.Era, r.Status, r.Took, r.Detail)
		if r.Status != probe.Failed || !strings.HasPrefix(r.Detail, "the server died") || !strings.Contains(r.Detail, "stopped taking connections") {
			t.Errorf("fixture %d does not say the server stopped taking connections while it ran", r.Fixture)
		}
	}
	want := []string{"6 deadlines (2026-07-28)", "10 SSE stream headers (2026-07-28)"}
	if len(rep.Deaths) != 1 || !slices.Equal(rep.Deaths[0].During, want) {
		t.Fatalf("the report tells of deaths %v, want one during %v", rep.Deaths, want)
	}
}

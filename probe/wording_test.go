package probe_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/probe"
	"github.com/mcprel/mcprel/review"
)

// A cancelled call that goes on reporting progress fails fixture 1 (a
// cancellation over stdio) and fixture 4 (a POSTed one, 2025 HTTP), and
// the failure says what the number it gives counts: the call's progress
// reports that came later than the quiet wait after the cancellation.
func TestProgressAfterACancellationSaysWhatItCounts(t *testing.T) {
	const counts = "of its progress reports came later than 500ms after the cancellation"
	for _, r := range probeFakeOnly(t, "progress-after-cancel", 1).Results {
		t.Logf("%2d %s %s: %s", r.Fixture, r.Era, r.Status, r.Detail)
		if r.Status != probe.Failed || !strings.Contains(r.Detail, counts) {
			t.Errorf("fixture 1 (%s) does not say what it counted", r.Era)
		}
	}
	pol, err := review.Parse("slow.yaml", []byte("operations:\n  - name: slow\n    semantics: {kind: read-only}\n    progress: {emits: true}\n    probe: {call: true, arguments: {}}\n"))
	must(t, err)
	fake := &httpFake{slow: true}
	rep, err := probe.Run(context.Background(), &probe.Options{Target: probe.Target{URL: fake.start(t)}, Policy: pol, Timing: fastTiming, Only: []int{4}})
	must(t, err)
	for _, r := range rep.Results {
		t.Logf("%2d %s %s: %s", r.Fixture, r.Era, r.Status, r.Detail)
		if r.Era == "2025-11-25" && (r.Status != probe.Failed || !strings.Contains(r.Detail, counts)) {
			t.Errorf("fixture 4 (%s) does not say what it counted", r.Era)
		}
	}
}

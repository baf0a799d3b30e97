package probe_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/probe"
)

// An answer to server/discover is no claim to the 2026-07-28 era: the
// era is probed only when supportedVersions lists it and the server then
// serves a 2026-07-28 request. The Go SDK's stateful HTTP server answers
// server/discover listing 2025 versions alone, and refuses every 2026
// request with -32022; the probe speaks 2025 to it.
func TestTheModernEraIsListedAndServed(t *testing.T) {
	for _, tc := range []struct {
		name string
		fake *httpFake
		why  string // what the report says of the 2026-07-28 era
	}{
		{"not listed", &httpFake{versions: []string{"2025-11-25", "2025-06-18"}, refusesModern: true}, `supportedVersions ["2025-11-25" "2025-06-18"], without 2026-07-28`},
		{"listed, refused", &httpFake{refusesModern: true}, "refused a 2026-07-28 tools/list: -32022"},
		{"listed alone, not served", &httpFake{versions: []string{"2026-07-28"}, refusesModern: true}, "refused a 2026-07-28 tools/list: -32022"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := probe.Run(context.Background(), &probe.Options{Target: probe.Target{URL: tc.fake.start(t)}, Timing: fastTiming, Only: []int{2}})
			must(t, err)
			if !slices.Equal(rep.Eras, []string{"2025-11-25"}) {
				t.Fatalf("eras %v, want 2025-11-25 alone", rep.Eras)
			}
			if len(rep.ErasNotSpoken) != 1 || !strings.HasPrefix(rep.ErasNotSpoken[0], "2026-07-28: ") || !strings.Contains(rep.ErasNotSpoken[0], tc.why) {
				t.Errorf("the report says of the eras not spoken %q, want 2026-07-28 with %q", rep.ErasNotSpoken, tc.why)
			}
			for _, r := range rep.Results {
				if r.Era != "2025-11-25" {
					t.Errorf("fixture %d got a %s verdict: %s", r.Fixture, r.Era, r.Status)
				}
			}
		})
	}
}

package server

import (
	"runtime"
	"strings"
	"testing"
)

// An argument summary keeps each value's first 32 characters (of its
// JSON), cuts a longer one to 31 and an ellipsis, counts characters
// rather than bytes, sorts by name and hides secrets.
func TestArgumentSummary(t *testing.T) {
	thirty := strings.Repeat("a", 30) // with its quotes, a value of 32 characters
	for _, c := range []struct{ args, want string }{
		{`{"b":1,"a":"x"}`, `a="x" b=1`},
		{`{"s":"` + thirty + `"}`, `s="` + thirty + `"`},
		{`{"s":"` + thirty + `b"}`, `s="` + thirty + `…`},
		{`{"s":"` + strings.Repeat("é", 30) + `"}`, `s="` + strings.Repeat("é", 30) + `"`},
		{`{"s":"` + strings.Repeat("🙂", 31) + `"}`, `s="` + strings.Repeat("🙂", 30) + `…`},
		{`{"n":[1,2,3],"password":"hunter2"}`, `n=[1,2,3] password=[secret]`},
		{`[1]`, `(not a JSON object)`},
	} {
		rec := RequestRecord{args: []byte(c.args), secret: []string{"password"}}
		if got := rec.ArgumentSummary(); got != c.want {
			t.Errorf("%s: summary %q, want %q", c.args, got, c.want)
		}
	}
}

// The summary is a string that outlives the request (a span holds it
// until it is exported): it must not keep a buffer the size of the
// arguments, nor copy a long value whole to cut it.
func TestArgumentSummaryOfALargeArgument(t *testing.T) {
	rec := RequestRecord{args: []byte(`{"blob":"` + strings.Repeat("A", 1<<20) + `","n":1}`)}
	rec.ArgumentSummary()
	const calls = 10
	var before, after runtime.MemStats
	var summary string
	runtime.ReadMemStats(&before)
	for range calls {
		summary = rec.ArgumentSummary()
	}
	runtime.ReadMemStats(&after)
	// What else the process allocates meanwhile is counted too: the
	// bound is far above a summary's few bytes and far below the
	// argument's megabyte.
	if n := (after.TotalAlloc - before.TotalAlloc) / calls; n > 16<<10 {
		t.Errorf("a summary of %d bytes allocated %d bytes for a 1 MiB argument", len(summary), n)
	}
	if want := `blob="` + strings.Repeat("A", 30) + `… n=1`; summary != want {
		t.Errorf("summary %q, want %q", summary, want)
	}
}

// Package scenario is the script every interop client runs against
// `mcprel serve`, and the judge of what each client returned: the same
// steps and the same verdicts for the TypeScript SDKs, the Inspector CLI,
// the official Go SDK and mcp-go, so that no client is held to a weaker
// standard than another.
//
// The steps live in scenario.json, which the Node drivers read too.
// Clients hand back each tools/call result as the JSON they received
// (re-encoded by the SDK); the judge reads it the way a program would.
package scenario

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

//go:embed scenario.json
var raw []byte

// Path is where scenario.json lives, relative to the repository root, for
// drivers that read it from disk.
const Path = "internal/interop/scenario/scenario.json"

// Script is scenario.json.
type Script struct {
	Tools    []string `json:"tools"`
	Steps    []Step   `json:"steps"`
	Progress Step     `json:"progress"`
	Cancel   Step     `json:"cancel"`
}

// Step is one tools/call and what must come of it.
type Step struct {
	Name string         `json:"name"`
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
	// Meta goes in the request's params._meta.
	Meta   map[string]any `json:"meta,omitempty"`
	Expect Expect         `json:"expect"`
	// LastProgress is the progress value the progress step must end at.
	LastProgress float64 `json:"lastProgress,omitempty"`
}

// Expect is the outcome a step must have.
type Expect struct {
	Failure    string         `json:"failure,omitempty"`
	Text       string         `json:"text,omitempty"`
	Structured map[string]any `json:"structured,omitempty"`
	Meta       map[string]any `json:"meta,omitempty"`
	// Delivery is the state the result's one outbox delivery must be in:
	// a call's, in _meta["dev.mcprel/delivery"] (skipped for a client
	// that hides _meta); a lookup's, in structuredContent.deliveries.
	Delivery string `json:"delivery,omitempty"`
}

// Load returns the script.
func Load() Script {
	var s Script
	if err := json.Unmarshal(raw, &s); err != nil {
		panic("scenario.json: " + err.Error())
	}
	return s
}

// Run judges one client's pass through the script, remembering the values
// "$name" placeholders bind to.
type Run struct {
	// NoMeta is set for a client that does not show a result's _meta:
	// meta expectations are then skipped, never counted as met.
	NoMeta bool
	bound  map[string]any
}

// result is a tools/call result as a program reads it.
type result struct {
	IsError           bool            `json:"isError"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	Meta              map[string]any  `json:"_meta"`
	Content           []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

// failure is the structured body of a tool failure.
type failure struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable *bool  `json:"retryable"`
}

// Judge says what is wrong with a step's result, "" when nothing is.
func (r *Run) Judge(step Step, got json.RawMessage) string {
	var res result
	if err := json.Unmarshal(got, &res); err != nil {
		return fmt.Sprintf("not a tools/call result (%v): %s", err, got)
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	text := ""
	if len(res.Content) > 0 && res.Content[0].Type == "text" {
		text = res.Content[0].Text
	}
	want := step.Expect
	if want.Failure != "" {
		var f failure
		switch {
		case !res.IsError:
			bad("want a tool failure %q, got a success", want.Failure)
		case res.StructuredContent != nil:
			bad("a failure carries structuredContent %s (clients validate it against the output schema)", res.StructuredContent)
		case json.Unmarshal([]byte(text), &f) != nil || f.Message == "" || f.Retryable == nil:
			bad("the failure's text is not its structured body: %q", text)
		case f.Code != want.Failure:
			bad("failure code %q, want %q (%s)", f.Code, want.Failure, f.Message)
		}
		if !r.NoMeta {
			m, _ := res.Meta["dev.mcprel/failure"].(map[string]any)
			if m == nil || m["code"] != want.Failure {
				bad(`_meta["dev.mcprel/failure"] = %v, want code %q`, res.Meta["dev.mcprel/failure"], want.Failure)
			}
		}
	} else if res.IsError {
		bad("want a success, got a failure: %s", text)
	}
	if want.Text != "" && text != want.Text {
		bad("text %q, want %q", text, want.Text)
	}
	if want.Structured != nil {
		var sc map[string]any
		if err := json.Unmarshal(res.StructuredContent, &sc); err != nil {
			bad("structuredContent %s is not an object", res.StructuredContent)
		}
		for _, k := range slices.Sorted(maps.Keys(want.Structured)) {
			if !r.match(want.Structured[k], sc[k]) {
				bad("structuredContent.%s = %v, want %v", k, sc[k], r.show(want.Structured[k]))
			}
		}
	}
	if want.Delivery != "" {
		var sc struct{ Deliveries []map[string]any }
		json.Unmarshal(res.StructuredContent, &sc)
		ds := sc.Deliveries
		if ds == nil && !r.NoMeta {
			b, _ := json.Marshal(res.Meta["dev.mcprel/delivery"])
			json.Unmarshal(b, &ds)
		}
		switch {
		case ds == nil && r.NoMeta:
		case len(ds) != 1:
			bad("%d deliveries, want one %s", len(ds), want.Delivery)
		case ds[0]["state"] != want.Delivery:
			bad("the delivery is %v, want %s", ds[0]["state"], want.Delivery)
		}
	}
	if want.Meta != nil && !r.NoMeta {
		for _, k := range slices.Sorted(maps.Keys(want.Meta)) {
			if !r.match(want.Meta[k], res.Meta[k]) {
				bad("_meta[%q] = %v, want %v", k, res.Meta[k], want.Meta[k])
			}
		}
	}
	return strings.Join(problems, "; ")
}

// match compares a wanted value with a got one; "$name" binds on first
// use and must equal its binding afterwards.
func (r *Run) match(want, got any) bool {
	if s, ok := want.(string); ok && strings.HasPrefix(s, "$") {
		if got == nil {
			return false
		}
		if r.bound == nil {
			r.bound = map[string]any{}
		}
		if b, seen := r.bound[s]; seen {
			return reflect.DeepEqual(b, got)
		}
		r.bound[s] = got
		return true
	}
	return reflect.DeepEqual(want, got)
}

func (r *Run) show(want any) any {
	if s, ok := want.(string); ok && strings.HasPrefix(s, "$") {
		if b, seen := r.bound[s]; seen {
			return fmt.Sprintf("%v (as bound by %s)", b, s)
		}
	}
	return want
}

package scenario

import (
	"strings"
	"testing"
)

// The judge is the only thing standing between a client's answer and a
// pass: each kind of wrong answer must be caught.
func TestJudge(t *testing.T) {
	s := Load()
	if len(s.Steps) == 0 || s.Progress.Tool == "" || s.Cancel.Tool == "" {
		t.Fatal("scenario.json has no steps")
	}
	failureStep := Step{Expect: Expect{Failure: "insufficient_stock"}}
	payStep := Step{Expect: Expect{Delivery: "delivered"}}
	okStep := Step{Expect: Expect{Structured: map[string]any{"id": "$x", "n": 3.0}, Meta: map[string]any{"dev.mcprel/replayed": false}}}
	const goodFailure = `{"isError":true,"content":[{"type":"text","text":"{\"code\":\"insufficient_stock\",\"message\":\"no\",\"retryable\":false}"}],` +
		`"_meta":{"dev.mcprel/failure":{"code":"insufficient_stock","message":"no","retryable":false}}}`
	for _, tc := range []struct {
		name   string
		run    *Run
		step   Step
		result string
		want   string // "" for a pass, else part of the problem
	}{
		{"a failure as mcprel sends it", &Run{}, failureStep, goodFailure, ""},
		{"a failure in structuredContent", &Run{}, failureStep,
			`{"isError":true,"structuredContent":{"code":"insufficient_stock"},"content":[{"type":"text","text":"{\"code\":\"insufficient_stock\",\"message\":\"no\",\"retryable\":false}"}]}`, "carries structuredContent"},
		{"another code", &Run{}, Step{Expect: Expect{Failure: "unknown_sku"}}, goodFailure, `failure code "insufficient_stock"`},
		{"a success where a failure is due", &Run{}, failureStep, `{"content":[]}`, "got a success"},
		{"a failure without _meta", &Run{}, failureStep,
			`{"isError":true,"content":[{"type":"text","text":"{\"code\":\"insufficient_stock\",\"message\":\"no\",\"retryable\":false}"}]}`, `_meta["dev.mcprel/failure"]`},
		{"without _meta, for a client that hides it", &Run{NoMeta: true}, failureStep,
			`{"isError":true,"content":[{"type":"text","text":"{\"code\":\"insufficient_stock\",\"message\":\"no\",\"retryable\":false}"}]}`, ""},
		{"a failure whose text is not its body", &Run{}, failureStep, `{"isError":true,"content":[{"type":"text","text":"oops"}]}`, "not its structured body"},
		{"a success", &Run{}, okStep, `{"structuredContent":{"id":"a","n":3},"_meta":{"dev.mcprel/replayed":false}}`, ""},
		{"a wrong member", &Run{}, okStep, `{"structuredContent":{"id":"a","n":4},"_meta":{"dev.mcprel/replayed":false}}`, "structuredContent.n"},
		{"a wrong mark", &Run{}, okStep, `{"structuredContent":{"id":"a","n":3},"_meta":{"dev.mcprel/replayed":true}}`, "dev.mcprel/replayed"},
		{"not JSON", &Run{}, okStep, `<html>`, "not a tools/call result"},
		{"a delivered payout", &Run{}, payStep, `{"structuredContent":{},"_meta":{"dev.mcprel/delivery":[{"state":"delivered"}]}}`, ""},
		{"a pending payout", &Run{}, payStep, `{"structuredContent":{},"_meta":{"dev.mcprel/delivery":[{"state":"pending"}]}}`, "the delivery is pending"},
		{"a payout without its delivery", &Run{}, payStep, `{"structuredContent":{}}`, "0 deliveries"},
		{"without _meta, for a client that hides it", &Run{NoMeta: true}, payStep, `{"structuredContent":{}}`, ""},
		{"a lookup's delivery", &Run{NoMeta: true}, payStep, `{"structuredContent":{"deliveries":[{"state":"failed"}]}}`, "the delivery is failed"},
	} {
		got := tc.run.Judge(tc.step, []byte(tc.result))
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: judged %q, want %q", tc.name, got, tc.want)
		}
	}
	// A binding holds across steps.
	r := &Run{}
	if p := r.Judge(okStep, []byte(`{"structuredContent":{"id":"a","n":3},"_meta":{"dev.mcprel/replayed":false}}`)); p != "" {
		t.Fatal(p)
	}
	if p := r.Judge(okStep, []byte(`{"structuredContent":{"id":"b","n":3},"_meta":{"dev.mcprel/replayed":false}}`)); !strings.Contains(p, "as bound by $x") {
		t.Errorf("a changed binding judged %q", p)
	}
}

package server

import "testing"

// A tool with an Idempotency policy is conditional unless it says
// otherwise, and its timeout is retryable only for a call that carried its
// key: without one, the effect may have happened and nothing dedupes it.
func TestRetryClassOfKeyedTools(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		keyed  bool
		class  RetryClass
		retry  bool
	}{
		{Policy{Idempotency: Idempotency{Key: KeyRequired}}, true, RetryConditional, true},
		{Policy{Idempotency: Idempotency{Key: KeyOptional}}, true, RetryConditional, true},
		{Policy{Idempotency: Idempotency{Key: KeyOptional}}, false, RetryConditional, false},
		{Policy{Idempotency: Idempotency{Key: KeyOptional}, Retry: RetrySafe}, false, RetrySafe, true},
		{Policy{}, false, RetryUnsafe, false},
	} {
		if got := tc.policy.retryClass(); got != tc.class {
			t.Errorf("%+v: class %v, want %v", tc.policy, got, tc.class)
		}
		if got := tc.policy.retryableAfterTimeout(tc.keyed); got != tc.retry {
			t.Errorf("%+v keyed=%v: retryable %v, want %v", tc.policy, tc.keyed, got, tc.retry)
		}
	}
}

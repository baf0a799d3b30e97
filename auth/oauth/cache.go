package oauth

import (
	"slices"
	"sync"
	"time"

	"github.com/mcprel/mcprel/auth"
)

// verdicts remembers the Principal of tokens already checked, by the
// SHA-256 of the token (the token itself is never kept), until the token
// expires. It holds at most max entries.
type verdicts struct {
	mu    sync.Mutex
	max   int
	m     map[[32]byte]verdict
	swept time.Time // when evict last dropped what expired
}

type verdict struct {
	p       auth.Principal
	refused error // when set, the token was refused, not p
	until   time.Time
}

func newVerdicts(max int) *verdicts {
	return &verdicts{max: max, m: make(map[[32]byte]verdict)}
}

// get returns the verdict on the token whose hash is sum: its Principal,
// or the error it was refused with; ok is false when there is none.
func (v *verdicts) get(sum [32]byte, now time.Time) (p auth.Principal, refused error, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.m[sum]
	if !ok {
		return auth.Principal{}, nil, false
	}
	if !now.Before(e.until) {
		delete(v.m, sum)
		return auth.Principal{}, nil, false
	}
	p = e.p
	p.Scopes = slices.Clone(p.Scopes) // the caller's to change
	return p, e.refused, true
}

func (v *verdicts) put(sum [32]byte, p auth.Principal, refused error, until, now time.Time) {
	if v.max == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.m[sum]; !ok && len(v.m) >= v.max {
		v.evict(now)
	}
	v.m[sum] = verdict{p, refused, until}
}

// evict makes room for one: every expired entry goes, when the last
// sweep is a minute old (so that a full cache costs a scan a minute, not
// one per token), else an arbitrary entry: a token evicted is verified
// again, which costs time, never correctness.
func (v *verdicts) evict(now time.Time) {
	if now.Sub(v.swept) >= time.Minute {
		v.swept = now
		for k, e := range v.m {
			if !now.Before(e.until) {
				delete(v.m, k)
			}
		}
		if len(v.m) < v.max {
			return
		}
	}
	for k := range v.m {
		delete(v.m, k)
		return
	}
}

func (v *verdicts) len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.m)
}

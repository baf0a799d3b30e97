package retry

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Defaults of Backoff and Planner.
const (
	// DefaultBase is the bound of the pause before the first retry.
	DefaultBase = 250 * time.Millisecond
	// DefaultCap is the most the bound grows to (250 ms doubled five times).
	DefaultCap = 8 * time.Second
	// DefaultMaxAttempts counts the first attempt: two retries at most.
	DefaultMaxAttempts = 3
)

const maxDuration = time.Duration(math.MaxInt64)

// Jitter returns a number in [0, 1) for the given retry, by which a
// Backoff scales the pause before it. Retries are numbered from 0 (the
// first retry).
type Jitter func(retry int) float64

// randomJitter draws from the runtime's generator, which is safe for
// concurrent use and seeded per process: clients spread differently on
// every run, which is what production wants.
func randomJitter(int) float64 { return rand.Float64() }

// SeededJitter returns a Jitter that is a pure function of seed and the
// retry number, for runs and tests that must be reproducible: the same
// seed gives the same pauses, and different seeds (one per client id, say,
// or client id and call) spread apart as random ones would. It hashes the
// seed and the retry number, so it holds no state and is safe for
// concurrent use.
func SeededJitter(seed string) Jitter {
	h := fnv.New64a()
	h.Write([]byte(seed))
	s := h.Sum64()
	return func(retry int) float64 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(retry))
		x := s
		for _, c := range b {
			x = (x ^ uint64(c)) * 0x100000001b3 // FNV-1a over the seed's hash and the retry
		}
		return float64(mix(x)>>11) / (1 << 53)
	}
}

// mix is SplitMix64's finaliser: FNV's low bits alone vary too little
// between neighbouring retry numbers.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Backoff is capped exponential backoff with full jitter: the pause before
// retry n is uniform in [0, min(Cap, Base·2ⁿ)). Full jitter spreads
// clients that failed together over the whole interval instead of moving
// the herd, and does the least work of the common schemes (AWS's
// "Exponential Backoff And Jitter"). The zero value is the default: 250 ms
// doubling to 8 s, random jitter.
type Backoff struct {
	// Base bounds the pause before the first retry; 0 means DefaultBase.
	Base time.Duration
	// Cap is the most the bound grows to; 0 means DefaultCap.
	Cap time.Duration
	// RetryAfterCap is the longest server-requested wait honoured; a
	// longer one is cut to it, so a broken or hostile server cannot park
	// its clients. 0 means Cap.
	RetryAfterCap time.Duration
	// Jitter scales each pause; nil means random (math/rand/v2).
	Jitter Jitter
	// Steady: once the bound has reached Cap and one pause was drawn
	// there, each further pause is exactly Cap instead of a fresh draw, so
	// a client keeps the phase its jittered pauses gave it. It is for
	// reconnecting to a server many clients lost at once: with a fresh
	// draw at the cap every time, the first 100 ms after the server
	// returns hold about twice the average of the reconnect period by
	// construction (herdbench: 2.1×); kept phases arrive as spread as they
	// are (1.2×). A call's retries keep full jitter.
	Steady bool
}

func (b Backoff) base() time.Duration {
	if b.Base > 0 {
		return b.Base
	}
	return DefaultBase
}

func (b Backoff) cap() time.Duration {
	if b.Cap > 0 {
		return b.Cap
	}
	return DefaultCap
}

func (b Backoff) retryAfterCap() time.Duration {
	if b.RetryAfterCap > 0 {
		return b.RetryAfterCap
	}
	return b.cap()
}

// Bound returns the upper bound of the jittered part of the pause before
// retry n (from 0): min(Cap, Base·2ⁿ).
func (b Backoff) Bound(retry int) time.Duration {
	base, limit := b.base(), b.cap()
	retry = max(retry, 0)
	if base >= limit || retry >= 62 || base > limit>>retry {
		return limit
	}
	return base << retry
}

// Delay returns the pause before retry n (from 0). retryAfter is what the
// server asked for (0 if nothing): it is a floor, cut to RetryAfterCap, and
// the jittered backoff is added on top of it, so that clients told the
// same time do not all come back at that instant. The result is at least
// both the server's (capped) wait and the plain jittered backoff, and less
// than RetryAfterCap + Cap.
func (b Backoff) Delay(retry int, retryAfter time.Duration) time.Duration {
	j := b.Jitter
	if j == nil {
		j = randomJitter
	}
	f := j(retry)
	if !(f > 0) { // negative or NaN: a misbehaving Jitter pauses least
		f = 0
	}
	f = min(f, math.Nextafter(1, 0))
	d := time.Duration(f * float64(b.Bound(retry)))
	if b.Steady && retry > 0 && b.Bound(retry-1) >= b.cap() {
		d = b.cap() // the phase was drawn at the cap before: keep it
	}
	wait := min(max(retryAfter, 0), b.retryAfterCap())
	if wait > maxDuration-d {
		return maxDuration
	}
	return wait + d
}

// DelayWithin is Delay for a call that must be over by deadline (the
// zero time: none). It reports false — give up — when the pause would end
// at or after the deadline, since an attempt started then has no time to
// run: a retry loop never sleeps past its call's deadline.
func (b Backoff) DelayWithin(retry int, retryAfter time.Duration, now, deadline time.Time) (time.Duration, bool) {
	d := b.Delay(retry, retryAfter)
	if !deadline.IsZero() && !now.Add(d).Before(deadline) {
		return 0, false
	}
	return d, true
}

// ParseRetryAfter reads an HTTP Retry-After header value (RFC 9110
// §10.2.3): delta-seconds, or an HTTP-date taken relative to now. It
// reports false for anything else — an empty value, a negative or
// fractional number, a date it cannot read — so that a bad header is
// ignored rather than guessed at. A date in the past means no wait; a
// number too large for a Duration saturates (Backoff caps it).
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if strings.Trim(value, "0123456789") == "" {
		secs, err := strconv.ParseUint(value, 10, 64)
		if err != nil || secs > uint64(maxDuration/time.Second) {
			return maxDuration, true // all digits, so only too large
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// Wait pauses for d, or until ctx ends, and reports whether the pause ran
// its course: the one wait between attempts, reconnections and polls.
func Wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

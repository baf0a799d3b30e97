package gateway

import "time"

// CircuitState is an upstream's circuit as the gateway sees it.
type CircuitState string

const (
	// CircuitClosed: calls are forwarded.
	CircuitClosed CircuitState = "closed"
	// CircuitOpen: calls are refused at once (upstream_unavailable with
	// retryAfterMs) until a probe reaches the upstream — or, for a stdio
	// upstream that died, until it is started again.
	CircuitOpen CircuitState = "open"
)

// circuit counts consecutive failures to reach an upstream. After
// threshold of them it opens for a cooldown that doubles (up to cap) while
// the probes that follow fail; a probe or call that reaches the upstream
// closes it. Guarded by the link's mutex.
type circuit struct {
	threshold int
	base, cap time.Duration

	failures  int
	open      bool
	until     time.Time // refuse until then; a probe is due after
	cooldown  time.Duration
	downUntil time.Time // a stdio upstream being restarted: refuse until its next start
}

// refuses reports whether a call must be refused now, and for how long to
// tell the caller to wait.
func (c *circuit) refuses(now time.Time) (time.Duration, bool) {
	if now.Before(c.downUntil) {
		return c.downUntil.Sub(now), true
	}
	if !c.open {
		return 0, false
	}
	if now.Before(c.until) {
		return c.until.Sub(now), true
	}
	// The cooldown passed and the probe has not answered yet.
	return c.cooldown, true
}

// record counts one attempt to reach the upstream; it reports whether the
// circuit opened or closed.
func (c *circuit) record(reached bool, now time.Time) bool {
	if reached {
		c.failures = 0
		if c.open {
			c.open, c.cooldown = false, 0
			return true
		}
		return false
	}
	c.failures++
	if c.open {
		// A probe failed: wait longer before the next.
		c.cooldown = min(c.cooldown*2, c.cap)
		c.until = now.Add(c.cooldown)
		return false
	}
	if c.failures < c.threshold {
		return false
	}
	c.open, c.cooldown = true, c.base
	c.until = now.Add(c.cooldown)
	return true
}

// probeDue reports whether the open circuit's cooldown has passed.
func (c *circuit) probeDue(now time.Time) bool { return c.open && !now.Before(c.until) }

// down refuses calls until next: the upstream is not connected.
func (c *circuit) down(next time.Time) { c.downUntil = next }

// reset closes the circuit: a new connection was made.
func (c *circuit) reset() {
	c.failures, c.open, c.cooldown = 0, false, 0
	c.downUntil = time.Time{}
}

func (c *circuit) state() CircuitState {
	if c.open || !c.downUntil.IsZero() {
		return CircuitOpen
	}
	return CircuitClosed
}

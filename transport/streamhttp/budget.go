package streamhttp

import (
	"context"
	"sync"
)

// readingBudget bounds the bytes of request bodies being read and decoded
// at once, server-wide and per tenant. Decoding a request makes passing
// copies of it, and a few hundred large bodies arriving together would
// otherwise take gigabytes before any of them reached the server's own
// admission (which bounds the calls that wait and run). A body reserves
// its bytes as they arrive, never ahead of them, so a slow or stalled
// body holds only what it sent.
type readingBudget struct {
	mu        sync.Mutex
	max       int64 // server-wide
	perTenant int64
	total     int64
	byTenant  map[string]int64
}

// charge is one body's share of the budget.
type charge struct {
	b      *readingBudget
	tenant string
	once   sync.Once
	mu     sync.Mutex
	n      int64
}

// errBudget says which bound a body could not fit in.
type errBudget struct{ tenant bool }

func (e errBudget) Error() string {
	if e.tenant {
		return "this client's request bodies being read take all the room it may have; retry later"
	}
	return "the server is reading as many request bytes as it may; retry later"
}

func (b *readingBudget) open(tenant string) *charge { return &charge{b: b, tenant: tenant} }

// grow reserves n more bytes for the body, or fails.
func (c *charge) grow(n int64) error {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byTenant[c.tenant]+n > b.perTenant {
		return errBudget{tenant: true}
	}
	if b.total+n > b.max {
		return errBudget{}
	}
	if b.byTenant == nil {
		b.byTenant = map[string]int64{}
	}
	b.byTenant[c.tenant] += n
	b.total += n
	c.mu.Lock()
	c.n += n
	c.mu.Unlock()
	return nil
}

// release gives the body's bytes back; later calls do nothing.
func (c *charge) release() {
	c.once.Do(func() {
		c.mu.Lock()
		n := c.n
		c.mu.Unlock()
		b := c.b
		b.mu.Lock()
		defer b.mu.Unlock()
		b.total -= n
		if b.byTenant[c.tenant] -= n; b.byTenant[c.tenant] <= 0 {
			delete(b.byTenant, c.tenant)
		}
	})
}

type chargeKey struct{}

// withCharge and releaseCharge carry a body's charge from where it was
// read to where the server has taken the request over.
func withCharge(ctx context.Context, c *charge) context.Context {
	return context.WithValue(ctx, chargeKey{}, c)
}

func releaseCharge(ctx context.Context) {
	if c, ok := ctx.Value(chargeKey{}).(*charge); ok {
		c.release()
	}
}

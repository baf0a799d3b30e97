package server

import (
	"cmp"
	"slices"
)

// TenantLoad is what one tenant's calls hold at one moment, within the
// limits every tenant has (Options.Tenant).
type TenantLoad struct {
	Tenant  string
	Running int   // calls whose handlers run
	Queued  int   // admitted calls waiting for a slot
	Bytes   int64 // bytes of the requests of its running and queued calls
}

// TenantLoads returns the at most n tenants whose calls hold the most
// now (running, then queued, then bytes; then by name), most first, and
// how many tenants hold any: for an operator's status page. A tenant
// with nothing running or waiting is not counted. Options.Tenant are the
// limits each of them is held to; without them no tenant's use is kept,
// and it returns none.
func (s *Server) TenantLoads(n int) (loads []TenantLoad, total int) {
	a := s.admit
	a.mu.Lock()
	all := make([]TenantLoad, 0, len(a.tenants))
	for tenant, l := range a.tenants {
		if l.running > 0 || l.queued > 0 || l.bytes > 0 {
			all = append(all, TenantLoad{Tenant: tenant, Running: l.running, Queued: l.queued, Bytes: l.bytes})
		}
	}
	a.mu.Unlock()
	slices.SortFunc(all, func(x, y TenantLoad) int {
		return cmp.Or(cmp.Compare(y.Running, x.Running), cmp.Compare(y.Queued, x.Queued),
			cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Tenant, y.Tenant))
	})
	return all[:min(max(n, 0), len(all))], len(all)
}

// TenantLimits are the limits every tenant is held to (Options.Tenant).
func (s *Server) TenantLimits() Limits { return s.admit.tenantLimits }

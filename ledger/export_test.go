package ledger

import "time"

// SetClock makes l read time from now, so tests can move past leases and
// retention without waiting.
func SetClock(l *Ledger, now func() time.Time) { l.now = now }

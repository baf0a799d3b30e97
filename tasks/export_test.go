package tasks

import "time"

// SetClock makes s read the time from now: tests move leases and TTLs.
func SetClock(s *Store, now func() time.Time) { s.now = now }

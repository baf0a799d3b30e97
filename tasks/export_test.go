package tasks

import "time"

// SetClock makes s read the time from now: tests move leases and TTLs.
func SetClock(s *Store, now func() time.Time) { s.now = now }

// SetBeforeWrite makes f run inside each transition of s between its read
// of the task and its write (op names the transition: "finish",
// "cancel", "checkpoint", "takeover", "input"): a test runs a competing
// transition there.
func SetBeforeWrite(s *Store, f func(op string)) { s.beforeWrite = f }

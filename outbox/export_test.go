package outbox

import "time"

// SetClock makes o read the time from now: tests move leases.
func SetClock(o *Outbox, now func() time.Time) { o.now = now }

// SetBeforeWrite makes f run inside each transition of o between its
// read and its write (op names it: "claim", "deliver", "renew"): a test
// runs a competing transition there.
func SetBeforeWrite(o *Outbox, f func(op string)) { o.beforeWrite = f }

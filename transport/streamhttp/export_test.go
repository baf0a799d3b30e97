package streamhttp

// OnDrained tells f each time a drainer has moved the last message of a
// stream whose connection was gone into the resumption log: a test that
// checks what was kept waits for it rather than race the drainer.
func OnDrained(h *Handler, f func()) { h.events.drained = f }

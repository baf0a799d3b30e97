package ledger

import "time"

// SetClock makes l read time from now, so tests can move past leases and
// retention without waiting.
func SetClock(l *Ledger, now func() time.Time) { l.now = now }

// OnRoute calls f with each decision l makes to answer a call from a read
// before it queues for the writer, or not.
func OnRoute(l *Ledger, f func(readFirst bool)) { l.onRoute = f }

// SetReapPace makes the SQLite reaper read chunk records at a time and at
// least minVisit a tick, until the test ends.
func SetReapPace(t interface{ Cleanup(func()) }, chunk, minVisit int) {
	oldChunk, oldMin := reapChunk, reapMinVisit
	reapChunk, reapMinVisit = chunk, minVisit
	t.Cleanup(func() { reapChunk, reapMinVisit = oldChunk, oldMin })
}

// SweepBudget is sweepBudget, for tests.
var SweepBudget = sweepBudget

// OnScanned calls f when Reap, on SQLite, has read a chunk of records and
// is about to delete the expired ones.
func OnScanned(l *Ledger, f func()) { l.onScanned = f }

// Migrations are the ledger's schema steps, for a test that builds an
// older schema.
var Migrations = migrations

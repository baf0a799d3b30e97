package tasks

import "time"

// SetClock makes s read the time from now: tests move leases and TTLs.
func SetClock(s *Store, now func() time.Time) { s.now = now }

// SetBeforeWrite makes f run inside each transition of s between its read
// of the task and its write (op names the transition: "finish",
// "cancel", "checkpoint", "renew", "takeover", "input"): a test runs a competing
// transition there. A creation runs it as "create" when it has counted the
// task in and written it, and as "full" each time it passes over a shard
// that holds its share.
func SetBeforeWrite(s *Store, f func(op string)) { s.beforeWrite = f }

// SetShards splits s's counts into n shards (see countShards). Every
// handle on one database must use the same n.
func SetShards(s *Store, n int) { s.shards = n }

// SetStartShards makes s start counting each new task at the shards f
// picks rather than at the next shards in turn.
func SetStartShards(s *Store, f func() (tenant, total int)) { s.startShards = f }

// Migrations are the tasks schema's steps.
var Migrations = migrations

// SetAfterHeld makes f run in each round of r's maintenance between its
// read of the tasks it holds (Store.Held) and its stopping the workers of
// the others: a test starts a task there.
func SetAfterHeld(r *Runner, f func()) { r.afterHeld = f }

package ledger

import (
	"hash/maphash"
	"sync/atomic"
)

// recentSlots is how many keys recentKeys remembers at most: 128 KiB.
const recentSlots = 1 << 14

// recentKeys remembers, lossily and in bounded memory, the keys whose
// records this process recently saw written or read, so that on SQLite
// only a likely duplicate is answered from a read before it queues for
// the writer. It has no false negatives that matter and no false
// positives that do: a key it forgot, or never saw (recorded by another
// process), takes the write path, which answers a duplicate correctly;
// a key it wrongly remembers pays one read. Each slot holds one key's
// hash, the newest to land there.
type recentKeys struct {
	seed  maphash.Seed
	slots [recentSlots]atomic.Uint64
}

func newRecentKeys() *recentKeys { return &recentKeys{seed: maphash.MakeSeed()} }

func (r *recentKeys) hash(op Op) uint64 {
	var h maphash.Hash
	h.SetSeed(r.seed)
	h.WriteString(op.Tenant)
	h.WriteByte(0)
	h.WriteString(op.Tool)
	h.WriteByte(0)
	h.WriteString(op.Key)
	return h.Sum64() | 1 // never the empty slot's 0
}

// add remembers op's key. A nil recentKeys (PostgreSQL) remembers nothing.
func (r *recentKeys) add(op Op) {
	if r == nil {
		return
	}
	h := r.hash(op)
	r.slots[h%recentSlots].Store(h)
}

// maybe reports whether op's key may have a record this process saw.
func (r *recentKeys) maybe(op Op) bool {
	if r == nil {
		return false
	}
	h := r.hash(op)
	return r.slots[h%recentSlots].Load() == h
}

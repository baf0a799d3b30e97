package mcp

// The values of the policy keys a tool's _meta carries in tools/list
// (MetaRetryClass, MetaKeyMode, MetaLedgerTransaction, MetaEffect,
// MetaReturnedRecords). They are the contract between the server, which
// advertises them, and "mcprel review", which reads them back: both sides
// use these names, so that neither can change a value alone. The values
// are plain strings, as a _meta map holds them after a JSON round trip.

// Values of MetaRetryClass: what a client may do when a call fails without
// an answer it can trust.
const (
	// RetryClassSafe: the call has no effects; it may be made again.
	RetryClassSafe = "safe"
	// RetryClassConditional: the call runs at most once per idempotency
	// key (or version); it may be made again with the same key and
	// arguments.
	RetryClassConditional = "conditional"
	// RetryClassUnsafe: nothing deduplicates the call; reconcile first.
	RetryClassUnsafe = "unsafe"
)

// Values of MetaKeyMode: whether a tool's calls carry an idempotency key
// (a tool that takes none advertises no MetaKeyMode).
const (
	// KeyModeRequired: a call without a key is refused.
	KeyModeRequired = "required"
	// KeyModeOptional: a call with a key runs at most once per key; one
	// without runs every time.
	KeyModeOptional = "optional"
	// KeyModeVersion: a versioned write, whose expected version refuses to
	// apply twice.
	KeyModeVersion = "version"
)

// Steps of an idempotency ledger's transaction, as MetaLedgerTransaction
// lists those that commit together.
const (
	// LedgerKeyClaim: the claim of the (scope, key) record.
	LedgerKeyClaim = "key_claim"
	// LedgerArgumentFingerprint: the fingerprint of the arguments that
	// tells a retry from a reused key.
	LedgerArgumentFingerprint = "argument_fingerprint"
	// LedgerEffectRecord: the business effect itself, written through the
	// ledger's transaction.
	LedgerEffectRecord = "effect_record"
	// LedgerResult: the stored result that replays return.
	LedgerResult = "result"
)

// Values of MetaEffect: where a keyed tool's effect lies.
const (
	// EffectInTransaction: the effect writes through the ledger's
	// transaction and commits with the key.
	EffectInTransaction = "in_transaction"
	// EffectUpstreamKey: the effect is outside the ledger's database, and
	// the key is passed on as the provider's own idempotency key.
	EffectUpstreamKey = "upstream_key"
	// EffectAtMostOnce: the effect is outside the ledger's database, at a
	// receiver that does not honour the key; the key is claimed before
	// the effect and never run again, and an answer lost leaves the
	// outcome unknown (reported as FailureOutcomeUnknown), not retried.
	EffectAtMostOnce = "at_most_once"
	// EffectOutbox: the effect is outside the ledger's database, recorded
	// as an intent of a transactional outbox in the ledger's transaction
	// (so it commits with the key) and delivered after, with a key the
	// receiver deduplicates by.
	EffectOutbox = "outbox"
)

// ReturnedRecordsDefensiveCopy, the value of MetaReturnedRecords: a replay
// is rebuilt from the stored JSON, never the ledger's own value, so no
// caller can alias another's result.
const ReturnedRecordsDefensiveCopy = "defensive-copy"

package review

// TestRef names a test in the mcprel repository: the file, relative to the
// module root, and the test function. A test in package review checks
// that every reference names a function that exists.
type TestRef struct {
	File string `json:"file"`
	Name string `json:"name"`
}

// Fixture is one of the failure scenarios a reliable operation must be
// shown to survive, with the mcprel tests that run it.
type Fixture struct {
	N        int    `json:"n"`
	Scenario string `json:"scenario"`
	// Applies says whether the scenario concerns this operation (a read
	// has no duplicate mutation); NotApplicable says why not.
	Applies       bool   `json:"applies"`
	NotApplicable string `json:"notApplicable,omitempty"`
	// Tests prove the scenario when the operation is served by mcprel.
	Tests []TestRef `json:"tests"`
	// Note says what the tests leave to the operation's own code, or
	// that mcprel has no test for it.
	Note string `json:"note,omitempty"`
}

// fixtureKind says which operations a fixture concerns.
type fixtureKind int

const (
	forAll fixtureKind = iota
	forStdio
	forHTTP
	forProgress
	forMutation
	forKeyed
	forTasks
)

type fixtureDef struct {
	scenario string
	kind     fixtureKind
	tests    []TestRef
	note     string
}

// fixtures are the twelve required scenarios, in the checklist's order,
// each mapped to the tests of this repository that run it against mcprel.
var fixtures = []fixtureDef{
	{"stdio: cancel before completion (cancellation wins; no response is ever written)", forStdio, []TestRef{
		{"server/race_test.go", "TestCancelThenComplete"},
		{"server/race_test.go", "TestProgressStopsAtCancellation"},
	}, ""},
	{"stdio: completion before a late cancel (the late cancel changes nothing)", forStdio, []TestRef{
		{"server/race_test.go", "TestCompleteThenCancel"},
		{"server/deadline_test.go", "TestTimeoutAfterCompletionChangesNothing"},
	}, ""},
	{"HTTP: the request's stream closed before completion", forHTTP, []TestRef{
		{"transport/streamhttp/http_test.go", "TestModernCloseThenComplete"},
		{"transport/streamhttp/http_test.go", "TestLegacyCancelThenComplete"},
		{"transport/streamhttp/http_test.go", "TestLegacyDisconnectIsNotCancellation"},
	}, "2026-07-28: the close is the cancellation; 2025: only the POSTed notifications/cancelled is"},
	{"progress resets the idle timeout while the maximum timeout still fires", forAll, []TestRef{
		{"server/deadline_test.go", "TestTwoClocks"},
		{"client/deadline_test.go", "TestProgressResetsOnlyIdle"},
		{"client/deadline_test.go", "TestMaxFiresWithoutProgress"},
		{"transport/streamhttp/keepalive_test.go", "TestKeepalivesDoNotResetIdle"},
	}, ""},
	{"duplicate mutation without an idempotency key under two JSON-RPC ids (runs twice, marked unsafe)", forMutation, []TestRef{
		{"idempotency/idempotency_test.go", "TestOptionalKeyMissingRunsEveryTime"},
	}, ""},
	{"duplicate mutation with one key and the same arguments (runs once, replayed)", forKeyed, []TestRef{
		{"idempotency/idempotency_test.go", "TestIdempotentCallRunsOnce"},
		{"ledger/ledger_test.go", "TestFirstCallThenReplay"},
	}, ""},
	{"a key reused with changed arguments (refused; nothing runs)", forKeyed, []TestRef{
		{"ledger/ledger_test.go", "TestConflictRunsNothing"},
		{"idempotency/idempotency_test.go", "TestIdempotencyRefusals"},
	}, ""},
	{"a slow consumer overruns the progress buffer (progress dropped and flagged, final response kept)", forAll, []TestRef{
		{"transport/stdio/slowreader_test.go", "TestSlowReaderGetsTheResult"},
		{"server/outbound/queue_test.go", "TestQueueDropsOldestProgressAndKeepsFinals"},
		{"server/outbound/queue_test.go", "TestQueueStaysBounded"},
		{"transport/streamhttp/resume_test.go", "TestResumeAfterSheddingFlagsRefetch"},
	}, ""},
	{"a broken stream: a new subscription (new id, no Last-Event-ID) and a refetch from the authoritative source", forAll, []TestRef{
		{"client/listen_test.go", "TestListenReconnectsAndRefetches"},
		{"client/session_test.go", "TestRefetchFlagNoticed"},
	}, "a broken 2026-07-28 tool call is not resumed: the client gets ErrConnectionLost and re-issues it with a new id only if its retry class allows"},
	{"tasks/cancel acknowledged, the worker's cancellation observed later at a checkpoint", forTasks, []TestRef{
		{"taskserver/taskserver_test.go", "TestCancelObservedAtCheckpoint"},
		{"tasks/tasks_test.go", "TestCancelIsObservedAtACheckpoint"},
		{"tasks/tasks_test.go", "TestWorkFinishingFirstCompletesDespiteTheIntent"},
	}, ""},
	{"two independent ledger connections race one key with the same arguments (one execution)", forKeyed, []TestRef{
		{"ledger/ledger_test.go", "TestBarrierRaceOnTwoHandles"},
		{"ledger/process_test.go", "TestManyKeysManyProcesses"},
		{"cmd/mcprel/ledger_test.go", "TestReplicasShareLedger"},
	}, ""},
	{"the caller mutates a returned result; the replay from the durable record is clean (and survives a reopen)", forKeyed, []TestRef{
		{"ledger/ledger_test.go", "TestReplayIsACopy"},
		{"idempotency/idempotency_test.go", "TestKeyedResultsAreExactAndTheHandlersOwn"},
		{"ledger/ledger_test.go", "TestReopenAndReconcile"},
	}, ""},
}

// AllFixtureTests lists every test the fixtures name, for checking that
// they exist.
func AllFixtureTests() []TestRef {
	var refs []TestRef
	for _, f := range fixtures {
		refs = append(refs, f.tests...)
	}
	return refs
}

// fixturesFor maps the twelve fixtures onto one operation.
func fixturesFor(op *Operation) []Fixture {
	transport := str(op.Transport)
	mutation := isMutation(op)
	keyed := mutation && (str(op.Idempotency.Key) == "required" || str(op.Idempotency.Key) == "optional")
	tasks := str(op.Tasks.Support) == "optional" || str(op.Tasks.Support) == "required"
	out := make([]Fixture, len(fixtures))
	for i, d := range fixtures {
		f := Fixture{N: i + 1, Scenario: d.scenario, Tests: d.tests, Note: d.note, Applies: true}
		switch d.kind {
		case forStdio:
			if transport == "streamable-http" {
				f.Applies, f.NotApplicable = false, "the operation is served over Streamable HTTP (fixture 3 is its counterpart)"
			}
		case forHTTP:
			if transport == "stdio" {
				f.Applies, f.NotApplicable = false, "the operation is served over stdio (fixtures 1 and 2 are its counterparts)"
			}
		case forMutation:
			if !mutation && op.Semantics.Kind != nil {
				f.Applies, f.NotApplicable = false, "a read-only operation has no mutation to duplicate"
			}
		case forKeyed:
			switch {
			case !mutation && op.Semantics.Kind != nil:
				f.Applies, f.NotApplicable = false, "a read-only operation has no mutation to duplicate"
			case mutation && !keyed && str(op.Idempotency.Key) == "version":
				f.Applies, f.NotApplicable = false, "a versioned write has no key: a replayed write is refused by its expected version (reconcile by reading)"
			case mutation && !keyed && op.Idempotency.Key != nil:
				f.Applies, f.NotApplicable = false, "the operation has no idempotency key: it is UNSAFE and never retried automatically"
			}
		case forTasks:
			if !tasks && op.Tasks.Support != nil {
				f.Applies, f.NotApplicable = false, "the operation does not run as a Task"
			}
		}
		out[i] = f
	}
	return out
}

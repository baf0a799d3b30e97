package ledger_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/store"
)

// The test binary doubles as the child process of the multi-process tests:
// with childEnv set it runs one child role and exits.
const childEnv = "MCPREL_LEDGER_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "race":
		raceChild()
	case "crash":
		crashChild()
	default:
		fmt.Fprintln(os.Stderr, "unknown child role", os.Getenv(childEnv))
		os.Exit(2)
	}
	os.Exit(0)
}

// child starts this test binary in a role, with its settings in the
// environment.
func child(t *testing.T, role string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + role}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

func childLedger(dsn string) *ledger.Ledger {
	ctx := context.Background()
	db, err := store.Open(ctx, dsn, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	l, err := ledger.Open(ctx, db, nil)
	if err == nil {
		err = db.Migrate(ctx, "ledger-test", effectsSchema)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return l
}

type raceReport struct{ Executed, Replayed, Failed int }

// raceChild waits for "go" on stdin, runs every key once from its own
// starting point, and reports what happened on stdout.
func raceChild() {
	l := childLedger(os.Getenv("DSN"))
	keys, _ := strconv.Atoi(os.Getenv("KEYS"))
	start, _ := strconv.Atoi(os.Getenv("START"))
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	var rep raceReport
	for k := range keys {
		key := fmt.Sprintf("k%03d", (k+start)%keys)
		o := op("acme", key, `{"quantity":3}`)
		res, err := l.Do(context.Background(), o, reserve(nil, o, 3))
		switch {
		case err != nil:
			fmt.Fprintln(os.Stderr, err)
			rep.Failed++
		case res.Replayed:
			rep.Replayed++
		default:
			rep.Executed++
		}
	}
	json.NewEncoder(os.Stdout).Encode(rep)
}

// 200 keys raced by 8 OS processes, each with its own handle: exactly 200
// executions and no errors.
func TestManyKeysManyProcesses(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		open(t, dsn, nil) // create the schema once, before the race
		const keys, procs = 200, 8
		type proc struct {
			cmd *exec.Cmd
			in  interface{ Close() error }
			out *bufio.Reader
		}
		ps := make([]proc, procs)
		for i := range ps {
			cmd := child(t, "race", "DSN="+dsn, "KEYS="+strconv.Itoa(keys), "START="+strconv.Itoa(i*keys/procs))
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			ps[i] = proc{cmd, in, bufio.NewReader(out)}
		}
		for _, p := range ps { // every child has its handle open
			if line, err := p.out.ReadString('\n'); line != "ready\n" {
				t.Fatalf("child said %q, %v", line, err)
			}
		}
		for _, p := range ps { // the barrier: release them all
			p.in.Close()
		}
		var total raceReport
		for _, p := range ps {
			var rep raceReport
			if err := json.NewDecoder(p.out).Decode(&rep); err != nil {
				t.Fatalf("reading a child's report: %v", err)
			}
			if err := p.cmd.Wait(); err != nil {
				t.Fatalf("child: %v", err)
			}
			total.Executed += rep.Executed
			total.Replayed += rep.Replayed
			total.Failed += rep.Failed
		}
		if total.Executed != keys || total.Failed != 0 || total.Replayed != keys*(procs-1) {
			t.Fatalf("processes report %+v; want %d executed, %d replayed, 0 failed", total, keys, keys*(procs-1))
		}
		if n := countEffects(t, open(t, dsn, nil), "acme", ""); n != keys {
			t.Fatalf("%d effect rows, want %d", n, keys)
		}
	})
}

// Where a crash child kills itself: before an operation, inside the
// effect after the business row (the transaction open, the result not
// stored yet), or right after the commit. "parent" leaves the timing to
// the parent, which kills the child after a random delay, wherever it is —
// inside the driver's commit, say.
var crashPhases = []string{"before", "effect", "after", "parent"}

const crashKeys = 25 // operations a crash child attempts

func crashKey(iter, i int) string { return fmt.Sprintf("crash-%03d-%02d", iter, i) }

// crashChild runs crashKeys operations and SIGKILLs itself at KILL_AT in
// PHASE, so the kill lands exactly there.
func crashChild() {
	l := childLedger(os.Getenv("DSN"))
	iter, _ := strconv.Atoi(os.Getenv("ITER"))
	killAt, _ := strconv.Atoi(os.Getenv("KILL_AT"))
	phase := os.Getenv("PHASE")
	die := func(at int, where string) {
		if at == killAt && where == phase {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	fmt.Println("ready")
	for i := range crashKeys {
		die(i, "before")
		o := op("crash", crashKey(iter, i), `{"quantity":1}`)
		_, err := l.Do(context.Background(), o, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
			res, err := reserve(nil, o, 1)(ctx, tx)
			die(i, "effect")
			return res, err
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		die(i, "after")
	}
}

// A child killed with SIGKILL at random points during mutations, 100
// times: afterwards every ledger record has its effect and every effect
// its record, and retrying each key replays the committed result or runs
// exactly once.
func TestCrashSafety(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		l := open(t, dsn, nil)
		rng := rand.New(rand.NewPCG(5, 17)) // fixed: the same exact kill points every run
		const iterations = 100
		var killedBefore, killedInTx, killedAfterCommit, parentKills, finishedFirst int
		for iter := range iterations {
			phase := crashPhases[rng.IntN(len(crashPhases))]
			killAt := rng.IntN(crashKeys)
			delay := time.Duration(rng.IntN(3000)) * time.Microsecond
			app := fmt.Sprintf("mcprel-crash-%d-%d", os.Getpid(), iter)
			cmd := child(t, "crash", "DSN="+storetest.Tagged(dsn, app), "ITER="+strconv.Itoa(iter), "PHASE="+phase, "KILL_AT="+strconv.Itoa(killAt))
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("iteration %d: child said %q, %v", iter, line, err)
			}
			if phase == "parent" {
				// Not synchronisation: the random delay is the kill point.
				time.Sleep(delay)
				cmd.Process.Signal(syscall.SIGKILL)
			}
			err := cmd.Wait()
			status, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			killed := status.Signaled() && status.Signal() == syscall.SIGKILL
			if !killed && !(phase == "parent" && err == nil) {
				t.Fatalf("iteration %d (%s at %d): child ended with %v, want SIGKILL", iter, phase, killAt, err)
			}
			switch {
			case phase == "before":
				killedBefore++
			case phase == "effect":
				killedInTx++
			case phase == "after":
				killedAfterCommit++
			case killed:
				parentKills++
			default:
				finishedFirst++ // the child was done before the kill arrived
			}

			// A commit the child sent just before it died may still be
			// landing: read only once its backends are gone.
			storetest.AwaitBackendsGone(t, dsn, app)

			// Before any retry: records and effects match one to one.
			recorded, effects := crashRows(t, l, iter)
			for key := range recorded {
				if effects[key] != 1 {
					t.Fatalf("iteration %d (%s at %d): key %s has a record and %d effects", iter, phase, killAt, key, effects[key])
				}
			}
			for key, n := range effects {
				if !recorded[key] {
					t.Fatalf("iteration %d (%s at %d): key %s has %d effects and no record", iter, phase, killAt, key, n)
				}
			}
			if phase != "parent" {
				// The kill point is exact: everything before it committed,
				// nothing after it did.
				want := killAt
				if phase == "after" {
					want = killAt + 1
				}
				if len(recorded) != want {
					t.Fatalf("iteration %d (%s at %d): %d records, want %d", iter, phase, killAt, len(recorded), want)
				}
			}

			// Retry every key: a recorded key replays, the rest run once.
			for i := range crashKeys {
				key := crashKey(iter, i)
				o := op("crash", key, `{"quantity":1}`)
				ran := false
				res, err := l.Do(ctx, o, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
					ran = true
					return reserve(nil, o, 1)(ctx, tx)
				})
				if err != nil {
					t.Fatalf("iteration %d: retrying %s: %v", iter, key, err)
				}
				if recorded[key] == ran || res.Replayed != recorded[key] {
					t.Fatalf("iteration %d: retrying %s (recorded %v) ran=%v replayed=%v", iter, key, recorded[key], ran, res.Replayed)
				}
			}
			recorded, effects = crashRows(t, l, iter)
			if len(recorded) != crashKeys || len(effects) != crashKeys {
				t.Fatalf("iteration %d after retries: %d records, %d keys with effects", iter, len(recorded), len(effects))
			}
			for key, n := range effects {
				if n != 1 {
					t.Fatalf("iteration %d after retries: key %s has %d effects", iter, key, n)
				}
			}
		}
		t.Logf("%d runs: killed %d before an operation, %d inside a transaction, %d right after a commit, %d at a random moment; %d finished before the parent's kill",
			iterations, killedBefore, killedInTx, killedAfterCommit, parentKills, finishedFirst)
	})
}

// crashRows returns the keys of one iteration with a ledger record, and the
// number of effect rows per key, read from one snapshot (store.ReadTx): a
// record and its effect commit together, so one snapshot has both or
// neither.
func crashRows(t *testing.T, l *ledger.Ledger, iter int) (recorded map[string]bool, effects map[string]int) {
	t.Helper()
	recorded, effects = map[string]bool{}, map[string]int{}
	prefix := fmt.Sprintf("crash-%03d-%%", iter)
	ctx := context.Background()
	err := l.DB().ReadTx(ctx, func(tx *store.Tx) error {
		rows, err := tx.Query(ctx, `SELECT idem_key FROM mcprel_ledger WHERE tenant = 'crash' AND idem_key LIKE ?`, prefix)
		if err != nil {
			return err
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return err
			}
			recorded[k] = true
		}
		if err := rows.Close(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT idem_key FROM effects WHERE tenant = 'crash' AND idem_key LIKE ?`, prefix)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return err
			}
			effects[k]++
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return recorded, effects
}

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
)

// TestGatewayPauseSoak is the kill soak's other half: a replica that is
// not dead but stopped. Two gateway replicas share one ledger (a SQLite
// file, or a PostgreSQL database); each round fires keyed send_emails at
// both, stops one of them (SIGSTOP) at a random moment for longer than
// its claims' lease — mostly — while the other serves the keys' retries,
// then lets it go on (SIGCONT) and asks every key once more of both.
// The stopped replica's claims run out under it: the other replica makes
// their keys' outcome unknown, and when the stopped one wakes with its
// upstream's answer, it must answer its caller with what the ledger
// records, not with its own success. For every key: sent at most once,
// exactly once if any call got a success, and never both outcome_unknown
// and a success, whichever replica answered and whenever. Skipped unless
// soakKillsEnv names the number of rounds (pauses):
//
//	MCPREL_SOAK_KILLS=100 go test -count=1 -run TestGatewayPauseSoak -v ./cmd/mcprel
//
// with MCPREL_TEST_POSTGRES_URL set for the PostgreSQL variant;
// soakLeaseEnv, soakDelayEnv, soakKeysEnv and soakSeedEnv as for the kill
// soak. A pause lasts between 3/4 of the lease and twice it.
func TestGatewayPauseSoak(t *testing.T) {
	cfg := soakSettings(t)
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		runPauseSoak(t, cfg, filepath.Join(dir, "sent"), filepath.Join(dir, "gw.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := storetest.Postgres(t)
		runPauseSoak(t, cfg, filepath.Join(t.TempDir(), "sent"), dsn)
	})
}

// pauseTotals add up a pause soak's rounds for its summary.
type pauseTotals struct {
	rounds, pastLease, keys, calls, sent, succeeded, unknown int
	heldAtPause, lost, split, twice, noAnswer, inProgress    int
	pauses                                                   []time.Duration
}

func runPauseSoak(t *testing.T, cfg soakConfig, sentFile, dsn string) {
	rng := rand.New(rand.NewPCG(cfg.seed, 3))
	t.Logf("seed %d (%s=%d replays it), %d pauses, %d keys each, 2 replicas, lease %v, pause delay [0, %v)",
		cfg.seed, soakSeedEnv, cfg.seed, cfg.rounds, cfg.keys, cfg.lease, cfg.maxDelay)
	gws := []*soakGateway{
		startSoakGateway(t, sentFile, dsn, cfg.lease.String(), "pausegw1"),
		startSoakGateway(t, sentFile, dsn, cfg.lease.String(), "pausegw2"),
	}
	var tot pauseTotals
	begin := time.Now()
	for round := 0; round < cfg.rounds && !t.Failed(); round++ {
		victim := rng.IntN(2)
		stopped, other := gws[victim], gws[1-victim]
		keys := make([]string, cfg.keys)
		args := make([]map[string]any, cfg.keys)
		hist := make([]*keyHistory, cfg.keys)
		onStopped := make([]bool, cfg.keys) // a call of the key went to the replica stopped
		for i := range keys {
			keys[i] = fmt.Sprintf("p%d-k%d-%08x", round, i, rng.Uint32())
			args[i] = soakArgs(keys[i])
			// Some answers come a little later, so that the stop finds
			// more calls whose upstream answers while their replica is
			// stopped.
			if d := rng.IntN(40); d > 0 {
				args[i]["delayMs"] = d
			}
			hist[i] = &keyHistory{}
		}
		call := func(g *soakGateway, i int) reply {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return classify(g.c.CallTool(ctx, "send_email", args[i], nil))
		}
		// Fire: each key on a random replica, half of them on a second
		// (or the same) one too, each call after a small stagger.
		var fired sync.WaitGroup
		answered := make([]bool, cfg.keys) // a call of the key on the stopped replica answered before the stop
		var answeredMu sync.Mutex
		for i := range keys {
			targets := []*soakGateway{gws[rng.IntN(2)]}
			if rng.IntN(2) == 0 {
				targets = append(targets, gws[rng.IntN(2)])
			}
			for _, g := range targets {
				stagger := time.Duration(rng.Int64N(int64(5 * time.Millisecond)))
				onStopped[i] = onStopped[i] || g == stopped
				fired.Add(1)
				tot.calls++
				go func() {
					defer fired.Done()
					time.Sleep(stagger) // the point: calls start at different moments
					r := call(g, i)
					hist[i].add(r)
					answeredMu.Lock()
					if g == stopped {
						answered[i] = true
					}
					answeredMu.Unlock()
				}()
			}
		}
		delay := time.Duration(rng.Int64N(int64(cfg.maxDelay)))
		pause := cfg.lease*3/4 + time.Duration(rng.Int64N(int64(cfg.lease*5/4)))
		tot.pauses = append(tot.pauses, pause)
		if pause > cfg.lease {
			tot.pastLease++
		}
		time.Sleep(delay) // the point: a stop at a random moment
		answeredMu.Lock()
		if err := stopped.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			answeredMu.Unlock()
			t.Fatal(err)
		}
		for i := range keys {
			if onStopped[i] && !answered[i] {
				tot.heldAtPause++
			}
		}
		answeredMu.Unlock()
		lostBefore := stopped.lostClaims.Load()

		// While it is stopped, every key is retried through the other
		// replica until it has a terminal answer.
		var retried sync.WaitGroup
		for i := range keys {
			retried.Add(1)
			go func() {
				defer retried.Done()
				deadline := time.Now().Add(20*time.Second + 4*cfg.lease)
				for {
					r := call(other, i)
					hist[i].add(r)
					switch {
					case r.kind == "success" || r.kind == mcp.FailureOutcomeUnknown:
						hist[i].mu.Lock()
						hist[i].final = r.kind
						hist[i].mu.Unlock()
						return
					case !r.transient() && r.kind != "no-answer", time.Now().After(deadline):
						return
					case r.kind == "no-answer":
						time.Sleep(50 * time.Millisecond) // a live gateway that did not answer: a pause, then again
					default:
						time.Sleep(r.pause()) // as the answer advises
					}
				}
			}()
		}
		time.Sleep(pause) // the point: stopped this long, whatever the retries do
		if err := stopped.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		fired.Wait()
		retried.Wait()
		// Every key once more, of both replicas: the record has settled,
		// and each must answer as every call before did.
		var asked sync.WaitGroup
		for i := range keys {
			for _, g := range gws {
				asked.Add(1)
				go func() {
					defer asked.Done()
					hist[i].add(call(g, i))
				}()
			}
		}
		asked.Wait()
		// The last calls' claims are settled only when the stopped
		// replica has written what it had after it woke: its calls have
		// all been answered (fired.Wait), so it has.
		tot.lost += int(stopped.lostClaims.Load() - lostBefore)

		sent := sentCounts(t, sentFile)
		for i, key := range keys {
			h := hist[i]
			h.check(t, key, sent[key])
			tot.keys++
			tot.sent += sent[key]
			tot.noAnswer += h.count("no-answer")
			tot.inProgress += h.count(mcp.FailureInProgress)
			if h.count("success") > 0 && h.count(mcp.FailureOutcomeUnknown) > 0 {
				tot.split++
			}
			if sent[key] > 1 {
				tot.twice++
			}
			switch h.final {
			case "success":
				tot.succeeded++
			case mcp.FailureOutcomeUnknown:
				tot.unknown++
			}
		}
		tot.rounds++
		if t.Failed() {
			t.Logf("round %d failed (%s stopped after %v for %v); its stderr:\n%s", round, stopped.name, delay, pause, stopped.tail)
		}
	}
	slices.Sort(tot.pauses)
	var median time.Duration
	if len(tot.pauses) > 0 {
		median = tot.pauses[len(tot.pauses)/2]
	}
	t.Logf("summary: %d pauses (%d past the lease, median %v), %d keys, %d calls fired, %d sent, %d succeeded, %d outcome_unknown, in %v",
		tot.rounds, tot.pastLease, median.Round(time.Millisecond), tot.keys, tot.calls, tot.sent, tot.succeeded, tot.unknown, time.Since(begin).Round(time.Millisecond))
	t.Logf("%d keys with a call unanswered on the replica as it stopped; %d of its calls answered with the ledger's record after their claim was lost; %d in_progress and %d unanswered calls; keys sent twice: %d; keys with two outcomes: %d",
		tot.heldAtPause, tot.lost, tot.inProgress, tot.noAnswer, tot.twice, tot.split)
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// The long kill tests of the gateway's ledger. They are skipped unless
// soakKillsEnv names the number of kill rounds, so that make check stays
// fast:
//
//	MCPREL_SOAK_KILLS=100 go test -count=1 -run TestGatewayKillSoak -v ./cmd/mcprel
//
// with MCPREL_TEST_POSTGRES_URL set for the PostgreSQL variant.
// soakSeedEnv replays one run's random choices (the seed is logged);
// soakLeaseEnv and soakDelayEnv change the claims' lease (1s) and the
// longest delay before a kill (25ms).
const (
	soakKillsEnv = "MCPREL_SOAK_KILLS"
	soakSeedEnv  = "MCPREL_SOAK_SEED"
	soakLeaseEnv = "MCPREL_SOAK_LEASE"
	soakDelayEnv = "MCPREL_SOAK_MAX_DELAY"
	soakKeysEnv  = "MCPREL_SOAK_KEYS"
)

// soakGateway is one "mcprel gateway --http" in front of the mailer.
type soakGateway struct {
	name   string
	cmd    *exec.Cmd
	c      *client.Client
	exited chan struct{} // closed when the process has been waited for
	tail   *lineTail
	// lostClaims counts the calls it answered with what the ledger
	// records because their claim was lost while they ran (its log).
	lostClaims atomic.Int64
}

// lineTail keeps the last lines a process wrote to stderr, for the
// message of a failure.
type lineTail struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineTail) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	if len(l.lines) > 40 {
		l.lines = l.lines[len(l.lines)-40:]
	}
}

func (l *lineTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// startSoakGateway runs the gateway of startMailGateway on dsn (a SQLite
// file, or a PostgreSQL URL passed in MCPREL_DB, never on the command
// line) with the claims' lease given; name tags its PostgreSQL
// connections (storetest.Tagged). It is killed when the test ends.
func startSoakGateway(t testing.TB, sentFile, dsn, lease, name string) *soakGateway {
	t.Helper()
	g, err := spawnSoakGateway(t, sentFile, dsn, lease, name)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// spawnSoakGateway is startSoakGateway for any goroutine: it reports
// what went wrong rather than ending the test.
func spawnSoakGateway(t testing.TB, sentFile, dsn, lease, name string) (*soakGateway, error) {
	policy, err := filepath.Abs("../../examples/gateway/mail.yaml")
	if err != nil {
		return nil, err
	}
	args := []string{"gateway", "--http", "127.0.0.1:0", "--policy", policy, "--lease", lease,
		"--upstream", "mail=" + os.Args[0] + " -test.run=^$"}
	env := []string{mailerEnv + "=" + sentFile}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		env = append(env, "MCPREL_DB="+storetest.Tagged(dsn, name))
	} else {
		args = append(args, "--db", dsn)
	}
	cmd := exec.Command(binary, args...)
	cmd.Dir = filepath.Dir(sentFile)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &soakGateway{name: name, cmd: cmd, exited: make(chan struct{}), tail: &lineTail{}}
	first := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stderr)
		if lines.Scan() {
			first <- lines.Text()
		}
		close(first)
		for lines.Scan() {
			if strings.Contains(lines.Text(), "claim was lost while it ran") {
				g.lostClaims.Add(1)
			}
			g.tail.add(lines.Text())
		}
		cmd.Wait() // after stderr is read to its end, as Wait wants
		close(g.exited)
	}()
	t.Cleanup(func() { g.kill(t) })
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	var url string
	select {
	case url = <-first:
	case <-timer.C:
		g.kill(t)
		return nil, fmt.Errorf("gateway %s printed nothing in 30 s", name)
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		g.kill(t)
		return nil, fmt.Errorf("gateway %s: first stderr line %q is not the endpoint URL\n%s", name, url, g.tail)
	}
	if g.c, err = client.DialHTTP(context.Background(), url, nil); err != nil {
		return nil, fmt.Errorf("gateway %s: %v", name, err)
	}
	return g, nil
}

// kill SIGKILLs the gateway and waits for it; its upstream (a process
// group of its own) is left to notice on its own. It is idempotent.
func (g *soakGateway) kill(t testing.TB) {
	g.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-g.exited:
	case <-time.After(30 * time.Second):
		t.Errorf("gateway %s (pid %d) not gone 30 s after SIGKILL", g.name, g.cmd.Process.Pid)
	}
	if g.c != nil {
		g.c.Close()
	}
}

// childPids are the processes whose parent is pid (Linux /proc; none
// where there is no /proc).
func childPids(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, ok := procStat(p); ok && ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

// procStat reads a process's state and parent from /proc.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid, true
}

// awaitGone waits until each of pids has exited (or is a zombie nobody
// reaps): an upstream whose gateway was killed may still be sending what
// it had read from its stdin, and what it sent is settled only when it is
// gone. One not gone in 20 s is reported and killed.
func awaitGone(t testing.TB, pids []int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range pids {
		for {
			state, _, ok := procStat(pid)
			if !ok || state == "Z" || state == "X" {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the upstream (pid %d) of a killed gateway still runs (%s) after 20 s; killing it", pid, state)
				syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(2 * time.Millisecond) // polling another process's state
		}
	}
}

// sentCounts counts the lines of the mailer's file: each is the "to" of
// one send.
func sentCounts(t testing.TB, file string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, line := range strings.Fields(string(b)) {
		n[line]++
	}
	return n
}

// reply is what one downstream call got.
type reply struct {
	kind     string // "success", a failure code, "rpc-error" or "no-answer"
	replayed bool
	text     string // a success's text
	failure  mcp.Failure
	err      error
}

func classify(res *mcp.CallToolResult, err error) reply {
	if err != nil {
		if rpc := (*jsonrpc.Error)(nil); errors.As(err, &rpc) {
			return reply{kind: "rpc-error", err: err}
		}
		return reply{kind: "no-answer", err: err}
	}
	var text string
	if len(res.Content) > 0 {
		b, _ := json.Marshal(res.Content[0])
		var c struct {
			Text string `json:"text"`
		}
		json.Unmarshal(b, &c)
		text = c.Text
	}
	replayed, _ := res.Meta[mcp.MetaReplayed].(bool)
	if !res.IsError {
		return reply{kind: "success", replayed: replayed, text: text}
	}
	var f mcp.Failure
	if err := json.Unmarshal([]byte(text), &f); err != nil || f.Code == "" {
		return reply{kind: "unstructured-error", text: text, replayed: replayed}
	}
	return reply{kind: f.Code, failure: f, replayed: replayed}
}

// transient says whether a failure is one to retry after its retryAfterMs
// rather than an answer.
func (r reply) transient() bool {
	switch r.kind {
	case mcp.FailureInProgress, mcp.FailureUpstreamUnavailable, mcp.FailureLedger, mcp.FailureOverloaded, mcp.FailureShuttingDown:
		return true
	}
	return false
}

func (r reply) pause() time.Duration {
	return min(max(time.Duration(r.failure.RetryAfterMs)*time.Millisecond, 5*time.Millisecond), 2*time.Second)
}

// keyHistory is every answer downstream calls with one key got.
type keyHistory struct {
	mu      sync.Mutex
	replies []reply
	final   string // the terminal answer of the retries: "success" or "outcome_unknown"
	// at the kill: whether a call had its answer, and whether the key had
	// been sent (known when the round's sends are counted)
	answeredBeforeKill bool
}

func (h *keyHistory) add(r reply) {
	h.mu.Lock()
	h.replies = append(h.replies, r)
	h.mu.Unlock()
}

func (h *keyHistory) count(kind string) int {
	n := 0
	for _, r := range h.replies {
		if r.kind == kind {
			n++
		}
	}
	return n
}

func (h *keyHistory) String() string {
	var parts []string
	for _, r := range h.replies {
		s := r.kind
		if r.replayed {
			s += "(replayed)"
		}
		if r.err != nil {
			s += "(" + r.err.Error() + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// check asserts the invariants of one key whose sends are counted.
func (h *keyHistory) check(t testing.TB, key string, sent int) {
	t.Helper()
	ok, unknown := h.count("success"), h.count(mcp.FailureOutcomeUnknown)
	var failed []string
	for _, r := range h.replies {
		switch {
		case r.kind == "success":
			if r.text != "sent to "+key {
				t.Errorf("key %s: a success says %q", key, r.text)
			}
		case r.kind == mcp.FailureOutcomeUnknown, r.kind == "no-answer", r.transient():
		default:
			failed = append(failed, r.kind)
		}
	}
	switch {
	case sent > 1:
		t.Errorf("INVARIANT: key %s was sent %d times; answers: %s", key, sent, h)
	case ok > 0 && sent != 1:
		t.Errorf("INVARIANT: key %s succeeded %d times but was sent %d times; answers: %s", key, ok, sent, h)
	case unknown > 0 && (ok > 0 || len(failed) > 0):
		t.Errorf("INVARIANT: key %s was reported outcome_unknown and also %d successes and failures %v; answers: %s", key, ok, failed, h)
	case len(failed) > 0:
		t.Errorf("key %s got unexpected answers %v; answers: %s", key, failed, h)
	case h.final == "":
		t.Errorf("key %s reached no terminal answer; answers: %s", key, h)
	}
}

// soakArgs are the arguments of key's send_email: the key is also the
// address, so the sent file counts each key's sends.
func soakArgs(key string) map[string]any {
	return map[string]any{"to": key, "requestId": key}
}

// callOnce is one send_email with key on g, bounded.
func callOnce(g *soakGateway, key string) reply {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return classify(g.c.CallTool(ctx, "send_email", soakArgs(key), nil))
}

// settle retries key on g until it has a terminal answer — a success or
// outcome_unknown — following retryAfterMs, for at most bound.
func settle(g *soakGateway, key string, h *keyHistory, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for {
		r := callOnce(g, key)
		h.add(r)
		switch {
		case r.kind == "success" || r.kind == mcp.FailureOutcomeUnknown:
			h.mu.Lock()
			h.final = r.kind
			h.mu.Unlock()
			return
		case !r.transient() && r.kind != "no-answer":
			return // an answer check reports
		case time.Now().After(deadline):
			return
		case r.kind == "no-answer":
			time.Sleep(50 * time.Millisecond) // a live gateway that did not answer: a pause, then again
		default:
			time.Sleep(r.pause()) // as the answer advises
		}
	}
}

// soakConfig reads the soak's environment; the test is skipped unless
// soakKillsEnv is set.
type soakConfig struct {
	rounds, keys int
	lease        time.Duration
	maxDelay     time.Duration
	seed         uint64
}

func soakSettings(t *testing.T) soakConfig {
	t.Helper()
	v := os.Getenv(soakKillsEnv)
	if v == "" {
		t.Skipf("a soak test: run it with %s=N (kill rounds, 100 or more for real), e.g. %s=100 go test -count=1 -run %s -v ./cmd/mcprel (and %s for PostgreSQL)",
			soakKillsEnv, soakKillsEnv, t.Name(), storetest.PostgresEnv)
	}
	c := soakConfig{keys: 8, lease: time.Second, maxDelay: 25 * time.Millisecond, seed: rand.Uint64()}
	var err error
	if c.rounds, err = strconv.Atoi(v); err != nil || c.rounds < 1 {
		t.Fatalf("%s=%q: want a number of rounds", soakKillsEnv, v)
	}
	if v := os.Getenv(soakKeysEnv); v != "" {
		if c.keys, err = strconv.Atoi(v); err != nil || c.keys < 1 {
			t.Fatalf("%s=%q: want a number of keys per round", soakKeysEnv, v)
		}
	}
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{soakLeaseEnv, &c.lease}, {soakDelayEnv, &c.maxDelay}} {
		if v := os.Getenv(d.env); v != "" {
			if *d.to, err = time.ParseDuration(v); err != nil || *d.to <= 0 {
				t.Fatalf("%s=%q: want a positive duration", d.env, v)
			}
		}
	}
	if v := os.Getenv(soakSeedEnv); v != "" {
		if c.seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: want a number", soakSeedEnv, v)
		}
	}
	return c
}

// soakTotals add up a soak's rounds for its summary.
type soakTotals struct {
	rounds, keys, calls, sent, succeeded, unknown    int
	unknownSent, unknownUnsent, answeredBeforeKill   int
	sentButUnansweredAtKill, inProgress, unavailable int
	killDelays                                       []time.Duration
}

// TestGatewayKillSoak is TestGatewayKilledMidCallNeverSendsTwice many
// times over, with kills at random moments — before, during and after the
// forwards of several concurrent keyed calls, some of them made twice at
// once — on one SQLite ledger with one gateway at a time, and on one
// PostgreSQL database shared by two gateway replicas, one of them killed
// each round and the calls retried through the other. For every key:
// sent at most once; sent exactly once if any call got a success; never
// both outcome_unknown and a success or failure; and every key ends, after
// retries, in a success or outcome_unknown.
func TestGatewayKillSoak(t *testing.T) {
	cfg := soakSettings(t)
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		runKillSoak(t, cfg, filepath.Join(dir, "sent"), filepath.Join(dir, "gw.db"), 1)
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := storetest.Postgres(t)
		runKillSoak(t, cfg, filepath.Join(t.TempDir(), "sent"), dsn, 2)
	})
}

func runKillSoak(t *testing.T, cfg soakConfig, sentFile, dsn string, replicas int) {
	rng := rand.New(rand.NewPCG(cfg.seed, uint64(replicas)))
	t.Logf("seed %d (%s=%d replays it), %d rounds of %d keys, %d replica(s), lease %v, kill delay [0, %v)",
		cfg.seed, soakSeedEnv, cfg.seed, cfg.rounds, cfg.keys, replicas, cfg.lease, cfg.maxDelay)
	lease := cfg.lease.String()
	started := 0
	start := func() *soakGateway {
		started++
		return startSoakGateway(t, sentFile, dsn, lease, fmt.Sprintf("soakgw%d", started))
	}
	gws := make([]*soakGateway, replicas)
	for i := range gws {
		gws[i] = start()
	}
	var tot soakTotals
	begin := time.Now()
	for round := 0; round < cfg.rounds && !t.Failed(); round++ {
		keys := make([]string, cfg.keys)
		hist := make([]*keyHistory, cfg.keys)
		for i := range keys {
			keys[i] = fmt.Sprintf("r%d-k%d-%08x", round, i, rng.Uint32())
			hist[i] = &keyHistory{}
		}
		// Fire: each key on a random replica, half of them at once on a
		// second (or the same) one too, each call after a small stagger.
		var fired sync.WaitGroup
		for i, key := range keys {
			targets := []*soakGateway{gws[rng.IntN(replicas)]}
			if rng.IntN(2) == 0 {
				targets = append(targets, gws[rng.IntN(replicas)])
			}
			for _, g := range targets {
				stagger := time.Duration(rng.Int64N(int64(5 * time.Millisecond)))
				fired.Add(1)
				tot.calls++
				go func() {
					defer fired.Done()
					time.Sleep(stagger) // the point: calls start at different moments
					hist[i].add(callOnce(g, key))
				}()
			}
		}
		victim := rng.IntN(replicas)
		delay := time.Duration(rng.Int64N(int64(cfg.maxDelay)))
		tot.killDelays = append(tot.killDelays, delay)
		time.Sleep(delay) // the point: a kill at a random moment
		dead := gws[victim]
		upstreams := childPids(dead.cmd.Process.Pid)
		for _, h := range hist { // what had been answered at the kill
			h.mu.Lock()
			h.answeredBeforeKill = slices.ContainsFunc(h.replies, func(r reply) bool { return r.kind == "success" })
			h.mu.Unlock()
		}
		sentAtKill := sentCounts(t, sentFile)
		dead.kill(t)
		fired.Wait()

		// Retry every key until it has a terminal answer, through the
		// replacement (one replica) or the survivor (two).
		var through *soakGateway
		if replicas == 1 {
			gws[victim] = start()
			through = gws[victim]
		} else {
			through = gws[1-victim]
		}
		var retried sync.WaitGroup
		for i, key := range keys {
			retried.Add(1)
			go func() {
				defer retried.Done()
				settle(through, key, hist[i], 20*time.Second+4*cfg.lease)
			}()
		}
		retried.Wait()
		awaitGone(t, upstreams)
		if replicas > 1 {
			storetest.AwaitBackendsGone(t, dsn, dead.name)
			gws[victim] = start()
		}

		sent := sentCounts(t, sentFile)
		for i, key := range keys {
			h := hist[i]
			h.check(t, key, sent[key])
			tot.keys++
			tot.sent += sent[key]
			tot.inProgress += h.count(mcp.FailureInProgress)
			tot.unavailable += h.count(mcp.FailureUpstreamUnavailable)
			if h.answeredBeforeKill {
				tot.answeredBeforeKill++
			} else if sentAtKill[key] > 0 {
				tot.sentButUnansweredAtKill++
			}
			switch h.final {
			case "success":
				tot.succeeded++
			case mcp.FailureOutcomeUnknown:
				tot.unknown++
				if sent[key] > 0 {
					tot.unknownSent++
				} else {
					tot.unknownUnsent++
				}
			}
		}
		tot.rounds++
		if t.Failed() {
			t.Logf("round %d failed (kill of %s after %v); its stderr:\n%s", round, dead.name, delay, dead.tail)
		}
	}
	slices.Sort(tot.killDelays)
	var median time.Duration
	if len(tot.killDelays) > 0 {
		median = tot.killDelays[len(tot.killDelays)/2]
	}
	t.Logf("summary: %d rounds, %d keys, %d calls fired, %d sent, %d succeeded, %d outcome_unknown (%d of them sent, %d never sent) in %v",
		tot.rounds, tot.keys, tot.calls, tot.sent, tot.succeeded, tot.unknown, tot.unknownSent, tot.unknownUnsent, time.Since(begin).Round(time.Millisecond))
	t.Logf("at the kills (median delay %v): %d keys answered already, %d sent but unanswered, %d not sent yet; %d in_progress and %d upstream_unavailable retries; %d gateways started",
		median, tot.answeredBeforeKill, tot.sentButUnansweredAtKill, tot.keys-tot.answeredBeforeKill-tot.sentButUnansweredAtKill, tot.inProgress, tot.unavailable, started)
}

// TestGatewaysRaceOneKey: eight gateway processes on one ledger get the
// same keyed send_email at once. Each has its own stdio mailer, all
// appending to one file, so the file counts sends across processes:
// exactly one happens; one call gets it as executed, and every other
// gets its replay, at once or after in_progress.
func TestGatewaysRaceOneKey(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		raceOneKey(t, filepath.Join(dir, "sent"), filepath.Join(dir, "gw.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := storetest.Postgres(t)
		raceOneKey(t, filepath.Join(t.TempDir(), "sent"), dsn)
	})
}

func raceOneKey(t *testing.T, sentFile, dsn string) {
	const n = 8
	gws := make([]*soakGateway, n)
	errs := make([]error, n)
	var up sync.WaitGroup
	for i := range gws {
		up.Go(func() { gws[i], errs[i] = spawnSoakGateway(t, sentFile, dsn, "5s", fmt.Sprintf("racegw%d", i)) })
	}
	up.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	key := "race-" + strconv.FormatUint(rand.Uint64(), 36)
	go0 := make(chan struct{})
	hist := make([]*keyHistory, n)
	var done sync.WaitGroup
	for i, g := range gws {
		hist[i] = &keyHistory{}
		done.Go(func() {
			<-go0 // the barrier: every call is released at once
			settle(g, key, hist[i], 30*time.Second)
		})
	}
	close(go0)
	done.Wait()
	sent := sentCounts(t, sentFile)
	executed, replayed, busy := 0, 0, 0
	for i, h := range hist {
		replayed += h.count("success")
		busy += h.count(mcp.FailureInProgress)
		for _, r := range h.replies {
			switch {
			case r.kind == "success" && !r.replayed:
				executed++
			case r.kind == "success", r.kind == mcp.FailureInProgress:
			default:
				t.Errorf("gateway %d answered %s: %+v %v", i, r.kind, r.failure, r.err)
			}
		}
		if h.final != "success" {
			t.Errorf("gateway %d: no success; answers %s", i, h)
		}
	}
	t.Logf("%d gateways, one key: sent %d, %d executed, %d replayed, %d in_progress answers retried", n, sent[key], executed, replayed-executed, busy)
	if sent[key] != 1 || len(sent) != 1 || executed != 1 {
		t.Errorf("%d gateways raced one key: sent %v, %d executed (not replayed); want it sent once and executed once", n, sent, executed)
		for i, h := range hist {
			t.Logf("gateway %d: %s", i, h)
		}
	}
}

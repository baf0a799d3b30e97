package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
)

// balancerConfig is the shipped HAProxy configuration the test runs, as
// written but for the addresses.
const balancerConfig = "../../examples/balancer/haproxy.cfg"

// The addresses in balancerConfig that the test replaces with its own.
const (
	cfgRoundRobin = "127.0.0.1:8080"
	cfgSessions   = "127.0.0.1:8090"
	cfgReplica1   = "127.0.0.1:8001"
	cfgReplica2   = "127.0.0.1:8002"
)

// haproxyPath returns the haproxy command, skipping the test without one
// (failing it under MCPREL_REQUIRE_INTEROP=1, which make check sets).
func haproxyPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("haproxy")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/haproxy"); serr == nil {
			return "/usr/sbin/haproxy"
		}
		msg := "haproxy is not installed (apt-get install haproxy, or make interop-deps as root): skipping the load balancer test"
		if os.Getenv("MCPREL_REQUIRE_INTEROP") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// balancer is HAProxy running balancerConfig in front of two replicas:
// roundRobin and sessions are the endpoints of its two frontends.
type balancer struct {
	roundRobin, sessions string
}

// startBalancer runs HAProxy in the foreground with balancerConfig in
// front of the replicas at the endpoint URLs replicas, until the test
// ends.
func startBalancer(t *testing.T, haproxy string, replicas [2]string) balancer {
	t.Helper()
	shipped := string(mustRead(t, balancerConfig))
	for _, addr := range []string{cfgRoundRobin, cfgSessions, cfgReplica1, cfgReplica2} {
		if !strings.Contains(shipped, addr) {
			t.Fatalf("%s no longer names %s, which the test replaces", balancerConfig, addr)
		}
	}
	var backends [2]string
	for i, r := range replicas {
		u, err := url.Parse(r)
		if err != nil || u.Path != "/mcp" {
			t.Fatalf("replica endpoint %q", r)
		}
		backends[i] = u.Host
	}
	// The frontends' ports are picked free and given to HAProxy, which
	// another process may take first: then HAProxy cannot bind, and the
	// test tries other ports.
	var last string
	for range 5 {
		front := [2]string{freePort(t), freePort(t)}
		cfg := strings.NewReplacer(cfgRoundRobin, front[0], cfgSessions, front[1],
			cfgReplica1, backends[0], cfgReplica2, backends[1]).Replace(shipped)
		file := filepath.Join(t.TempDir(), "haproxy.cfg")
		if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		// -db: in the foreground; -dR: no SO_REUSEPORT, so that a port
		// another HAProxy holds is refused rather than shared.
		cmd := exec.Command(haproxy, "-f", file, "-db", "-dR")
		out := &logBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		if listening(front, exited) && listensOn(cmd.Process.Pid, front) {
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
			})
			return balancer{roundRobin: "http://" + front[0] + "/mcp", sessions: "http://" + front[1] + "/mcp"}
		}
		cmd.Process.Kill()
		<-exited
		last = out.String()
	}
	t.Fatalf("haproxy did not start:\n%s", last)
	return balancer{}
}

// freePort returns a loopback address no one listened on a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// listening waits until both addrs accept connections, or the process
// that should listen on them exits.
func listening(addrs [2]string, exited <-chan struct{}) bool {
	deadline := time.Now().Add(10 * time.Second)
	for _, addr := range addrs {
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-exited:
				return false
			case <-time.After(10 * time.Millisecond): // polling another process's listener
			}
			if time.Now().After(deadline) {
				return false
			}
		}
	}
	select {
	case <-exited: // it exited after all: another process held the port
		return false
	default:
		return true
	}
}

// listensOn reports whether process pid holds the listening sockets of
// addrs, not another process that took a port first (a test in
// parallel). Where /proc cannot tell, it trusts that it does.
func listensOn(pid int, addrs [2]string) bool {
	tcp, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return true
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return true
	}
	held := map[string]bool{}
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil {
			held[link] = true
		}
	}
	for _, addr := range addrs {
		_, port, _ := net.SplitHostPort(addr)
		var n int
		fmt.Sscan(port, &n)
		local := fmt.Sprintf("0100007F:%04X", n) // 127.0.0.1:port, as the kernel writes it
		found := false
		for _, line := range strings.Split(string(tcp), "\n") {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) > 9 && f[1] == local && f[3] == "0A" && held["socket:["+f[9]+"]"] { // 0A: LISTEN
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// post sends one JSON-RPC message to endpoint as a 2026-07-28 request (or,
// with session set, as a request of that 2025-11-25 session), and returns
// the HTTP status and body. It reports failures rather than ending the
// test, for goroutines.
func post(endpoint, session, method, name, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	} else {
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// callResult is what the test reads of a tools/call answer.
type callResult struct {
	Result *struct {
		IsError           bool            `json:"isError"`
		ResultType        string          `json:"resultType"`
		TaskID            string          `json:"taskId"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Meta              map[string]any  `json:"_meta"`
	} `json:"result"`
	Error json.RawMessage `json:"error"`
}

// callSettled sends body, a keyed tools/call, until it is no longer in
// progress elsewhere (the same key's first call still running), and
// returns the answer that settled it.
func callSettled(endpoint, tool, body string) (callResult, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, raw, err := post(endpoint, "", "tools/call", tool, body)
		if err != nil {
			return callResult{}, err
		}
		var res callResult
		if status != 200 || json.Unmarshal([]byte(raw), &res) != nil || res.Result == nil {
			return res, fmt.Errorf("HTTP %d %s", status, raw)
		}
		if !res.Result.IsError {
			return res, nil
		}
		var f mcp.Failure
		b, _ := json.Marshal(res.Result.Meta[mcp.MetaFailure])
		json.Unmarshal(b, &f)
		if f.Code != mcp.FailureInProgress || time.Now().After(deadline) {
			return res, fmt.Errorf("%s: %s", tool, raw)
		}
		time.Sleep(time.Duration(max(f.RetryAfterMs, 10)) * time.Millisecond) // as the answer advises
	}
}

// concurrently runs f in n goroutines and fails the test with their
// errors.
func concurrently(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// served counts the requests of method a replica's log records.
func served(log *logBuffer, method string) int {
	return strings.Count(log.String(), " method="+method+" ")
}

// bothServed fails the test unless each replica's log records a request
// of method: the balancer sent one to each. A replica writes its log
// lines in batches, a moment after the requests.
func bothServed(t *testing.T, logs [2]*logBuffer, method string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i, l := range logs {
		for served(l, method) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d served no %s through the balancer; its log:\n%s", i+1, method, l)
			}
			time.Sleep(20 * time.Millisecond) // another process's log
		}
	}
}

// taskOf is the task of tools/call answer.
func taskOf(res callResult) (string, error) {
	if res.Result == nil || res.Result.ResultType != "task" || res.Result.TaskID == "" {
		return "", fmt.Errorf("not a task: %+v", res.Result)
	}
	return res.Result.TaskID, nil
}

// cancelAcross reads and cancels task through the round-robin balancer,
// twice each, so that each replica serves one of each, and waits for the
// task to end.
func cancelAcross(t *testing.T, endpoint, task string) taskView {
	t.Helper()
	for i := range 2 {
		if got := httpTask(t, endpoint, task); got.Status != "working" {
			t.Fatalf("tasks/get %d: %+v", i+1, got)
		}
	}
	for i := range 2 {
		ack := httpCall(t, endpoint, "tasks/cancel", task, taskRequest(10+i, "tasks/cancel", task))
		if !strings.Contains(ack, `"result"`) || strings.Contains(ack, `"error"`) {
			t.Fatalf("tasks/cancel %d: %s", i+1, ack)
		}
	}
	return waitTask(t, endpoint, task)
}

// Two replicas on one PostgreSQL database behind HAProxy running the
// shipped examples/balancer/haproxy.cfg. Through its round-robin
// frontend, with no affinity, 2026-07-28 requests land on either replica
// and what must hold across them holds: a keyed call sent repeatedly and
// concurrently runs once, a task created through one replica is read
// and cancelled through the other, an outbox intent is delivered once.
// A 2025-11-25 session there meets the replica that never saw it, which
// answers HTTP 404 as the spec prescribes, so a 2025 client cannot get
// going; through the frontend with affinity on Mcp-Session-Id a session
// stays on its replica, and when that replica stops, the client told 404
// by the other initializes again there and carries on.
func TestReplicasBehindBalancer(t *testing.T) {
	haproxy := haproxyPath(t)
	t.Run("gateway", func(t *testing.T) { testGatewayBehindBalancer(t, haproxy, storetest.Postgres(t)) })
	t.Run("serve", func(t *testing.T) { testServeBehindBalancer(t, haproxy, storetest.Postgres(t)) })
}

// taskMailPolicy adds to examples/gateway/mail.yaml the send_email of a
// second mailer (tasks_send_email), which runs only as a task: a keyed
// tool that runs as a task must require it.
const taskMailPolicy = `  - name: tasks_send_email
    semantics: {kind: mutation}
    deadlines: {idle_timeout: 30s, max_timeout: 2m}
    retry: {reconcile_with: tasks_list_sent}
    idempotency: {key: required, key_argument: requestId, external_effect_guard: at_most_once}
    tasks: {support: required}
`

// testGatewayBehindBalancer: two gateways in front of two mailers, whose
// send_email the upstream does not deduplicate: keyed, and keyed as a
// task.
func testGatewayBehindBalancer(t *testing.T, haproxy, dsn string) {
	dir := t.TempDir()
	sentFile := filepath.Join(dir, "sent")
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, append(mustRead(t, "../../examples/gateway/mail.yaml"), taskMailPolicy...), 0o600); err != nil {
		t.Fatal(err)
	}
	mailer := os.Args[0] + " -test.run=^$"
	var replicas [2]string
	var logs [2]*logBuffer
	for i := range replicas {
		replicas[i], logs[i], _ = startLoggedReplica(t, []string{mailerEnv + "=" + sentFile}, "gateway", "--http", "127.0.0.1:0",
			"--policy", policy, "--db", dsn,
			"--upstream", "mail="+mailer, "--upstream", "tasks="+mailer, "--upstream-keep-names", "mail")
	}
	lb := startBalancer(t, haproxy, replicas)
	sent := func(to string) int {
		n := 0
		for _, line := range strings.Fields(string(mustReadMaybe(t, sentFile))) {
			if line == to {
				n++
			}
		}
		return n
	}

	// A keyed send_email, 8 times at once and then again: sent once.
	once := modernCall(1, "send_email", `{"to":"lb-once","requestId":"lb-1","delayMs":200}`)
	concurrently(t, 8, func(int) error { _, err := callSettled(lb.roundRobin, "send_email", once); return err })
	for range 2 {
		res, err := callSettled(lb.roundRobin, "send_email", once)
		if err != nil || res.Result.Meta[mcp.MetaReplayed] != true {
			t.Fatalf("a retry of the sent call: %v %+v", err, res.Result)
		}
	}
	if n := sent("lb-once"); n != 1 {
		t.Fatalf("the keyed send_email was sent %d times through the balancer; want once", n)
	}
	bothServed(t, logs, "tools/call")

	// A keyed send_email as a task, created 4 times at once: one task,
	// which the upstream holds (it stalls); read and cancelled through
	// both replicas. It was sent, so its result is outcome_unknown, never
	// "cancelled" — and it was sent once.
	create := fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tasks_send_email","arguments":{"to":"lb-task","requestId":"lb-2","stall":true},%s}}`, taskMeta)
	var ids [4]string
	concurrently(t, len(ids), func(i int) error {
		res, err := callSettled(lb.roundRobin, "tasks_send_email", create)
		if err == nil {
			ids[i], err = taskOf(res)
		}
		return err
	})
	if ids[1] != ids[0] || ids[2] != ids[0] || ids[3] != ids[0] {
		t.Fatalf("one key created tasks %v", ids)
	}
	for deadline := time.Now().Add(20 * time.Second); sent("lb-task") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the upstream never sent the task's e-mail")
		}
		time.Sleep(5 * time.Millisecond) // polling a file another process writes
	}
	cancelAcross(t, lb.roundRobin, ids[0])
	raw := httpCall(t, lb.roundRobin, "tasks/get", ids[0], taskRequest(20, "tasks/get", ids[0]))
	var ended struct {
		Result struct {
			Status string `json:"status"`
			Result struct {
				IsError bool `json:"isError"`
				Meta    struct {
					Failure mcp.Failure `json:"dev.mcprel/failure"`
				} `json:"_meta"`
			} `json:"result"`
		} `json:"result"`
	}
	json.Unmarshal([]byte(raw), &ended)
	if r := ended.Result; r.Status != "completed" || !r.Result.IsError || r.Result.Meta.Failure.Code != mcp.FailureOutcomeUnknown || sent("lb-task") != 1 {
		t.Fatalf("the task cancelled across replicas, sent %d times: %s; want its result outcome_unknown, sent once", sent("lb-task"), raw)
	}
	bothServed(t, logs, "tasks/get")
	bothServed(t, logs, "tasks/cancel")
}

// startLoggedReplica is startLogged, also returning the process, and
// reporting a replica that does not start with what it said.
func startLoggedReplica(t *testing.T, env []string, args ...string) (string, *logBuffer, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	log := &logBuffer{}
	done := make(chan struct{})
	endpoint := make(chan string, 1)
	go func() {
		defer close(done)
		r := bufio.NewReader(stderr)
		first, _ := r.ReadString('\n')
		endpoint <- strings.TrimSpace(first)
		log.Write([]byte(first))
		r.WriteTo(log)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); <-done })
	url := <-endpoint
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		cmd.Process.Kill() // it may go on talking
		<-done
		t.Fatalf("mcprel %s did not start:\n%s", strings.Join(args, " "), log)
	}
	return url, log, cmd
}

// mustReadMaybe is the content of file, empty when it does not exist.
func mustReadMaybe(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return b
}

// testServeBehindBalancer: two "mcprel serve" replicas with the demo
// tools: reserve_inventory keyed in the ledger, send_payout through the
// outbox, generate_report a durable task; and the 2025 era through both
// frontends.
func testServeBehindBalancer(t *testing.T, haproxy, dsn string) {
	p := startProvider(t, "")
	var replicas [2]string
	var logs [2]*logBuffer
	var cmds [2]*exec.Cmd
	for i := range replicas {
		replicas[i], logs[i], cmds[i] = startLoggedReplica(t, nil, "serve", "--http", "127.0.0.1:0", "--db", dsn,
			"--payout-url", p.url)
	}
	lb := startBalancer(t, haproxy, replicas)

	// A keyed reservation, 8 times at once and then again: the stock
	// goes down once.
	if _, err := callSettled(lb.roundRobin, "set_stock", modernCall(1, "set_stock", `{"sku":"lb","quantity":10,"expectedVersion":0}`)); err != nil {
		t.Fatal(err)
	}
	reserve := modernCall(2, "reserve_inventory", `{"sku":"lb","quantity":3,"idempotencyKey":"lb-r"}`)
	concurrently(t, 8, func(int) error { _, err := callSettled(lb.roundRobin, "reserve_inventory", reserve); return err })
	if _, err := callSettled(lb.roundRobin, "reserve_inventory", reserve); err != nil {
		t.Fatal(err)
	}
	stock, err := callSettled(lb.roundRobin, "get_inventory", modernCall(3, "get_inventory", `{"sku":"lb"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(stock.Result.StructuredContent), `"available":7`) {
		t.Fatalf("the stock after one key's reservations: %s; want 7 of 10 left", stock.Result.StructuredContent)
	}
	bothServed(t, logs, "tools/call")

	// A payout, 8 times at once with one key: delivered once.
	payoutCall := modernCall(4, "send_payout", `{"account":"lb","cents":5,"idempotencyKey":"lb-p"}`)
	concurrently(t, 8, func(int) error { _, err := callSettled(lb.roundRobin, "send_payout", payoutCall); return err })
	c, err := client.DialHTTP(t.Context(), lb.roundRobin, &client.Options{Era: mcp.Modern})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if got := awaitDelivery(t, c, "lb-p"); got.Deliveries[0].State != "delivered" {
		t.Fatalf("the payout: %+v", got)
	}
	if s := p.Stats(); s.Applied != 1 || s.Deliveries != 1 {
		t.Fatalf("provider stats %+v, want one delivery, applied once", s)
	}

	// A report created through one replica, read and cancelled through
	// both: the worker observes the intent.
	created, err := callSettled(lb.roundRobin, "generate_report", reportCall(5, 2000, 20))
	if err != nil {
		t.Fatal(err)
	}
	task, err := taskOf(created)
	if err != nil {
		t.Fatal(err)
	}
	if got := cancelAcross(t, lb.roundRobin, task); got.Status != "cancelled" {
		t.Fatalf("the report cancelled across replicas: %+v", got)
	}
	bothServed(t, logs, "tasks/get")
	bothServed(t, logs, "tasks/cancel")

	t.Run("2025", func(t *testing.T) { testSessionsBehindBalancer(t, lb, logs, cmds) })
}

// initializeAt starts a 2025-11-25 session at endpoint and returns its id.
func initializeAt(t *testing.T, endpoint string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"lb","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("initialize: HTTP %d %s, session %q", resp.StatusCode, b, id)
	}
	if status, body, err := post(endpoint, id, "", "", `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil || status != http.StatusAccepted && status != http.StatusNotFound {
		t.Fatalf("notifications/initialized: %v HTTP %d %s", err, status, body)
	}
	return id
}

const legacyList = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`

// testSessionsBehindBalancer: the 2025 era, whose sessions live in the
// replica that began them.
func testSessionsBehindBalancer(t *testing.T, lb balancer, logs [2]*logBuffer, cmds [2]*exec.Cmd) {
	// Round robin: of a session's requests after initialize, those that
	// land on the other replica get 404 — the session is unknown there.
	session := initializeAt(t, lb.roundRobin)
	statuses := map[int]int{}
	for range 4 {
		status, body, err := post(lb.roundRobin, session, "", "", legacyList)
		if err != nil {
			t.Fatal(err)
		}
		if status != 200 && status != http.StatusNotFound {
			t.Fatalf("tools/list of a session through round robin: HTTP %d %s", status, body)
		}
		statuses[status]++
	}
	if statuses[http.StatusNotFound] == 0 || statuses[200] == 0 {
		t.Fatalf("a session's requests through round robin: %v; want some 404 from the replica that never saw it", statuses)
	}

	// So does the client package's: the replica that did not answer its
	// initialize answers its notifications/initialized with 404. Through
	// round robin over two replicas a session's every second request
	// meets the other replica: initializing again cannot help.
	if c, err := client.DialHTTP(t.Context(), lb.roundRobin, &client.Options{Era: mcp.Legacy}); err == nil {
		c.Close()
		t.Fatal("a 2025 client got going through round robin without affinity")
	} else if se := (*client.StatusError)(nil); !errors.As(err, &se) || se.Status != http.StatusNotFound {
		t.Fatalf("a 2025 client through round robin: %v; want the 404 of the replica that never saw its session", err)
	}

	// Affinity on Mcp-Session-Id: every request of the session reaches
	// the replica that began it.
	session = initializeAt(t, lb.sessions)
	for i := range 10 {
		if status, body, err := post(lb.sessions, session, "", "", legacyList); err != nil || status != 200 {
			t.Fatalf("request %d of a session with affinity: %v HTTP %d %s", i+1, err, status, body)
		}
	}
	sticky, err := client.DialHTTP(t.Context(), lb.sessions, &client.Options{Era: mcp.Legacy})
	if err != nil {
		t.Fatal(err)
	}
	defer sticky.Close()
	for i := range 10 {
		res, err := sticky.CallTool(context.Background(), "echo", map[string]any{"text": fmt.Sprint(i)}, nil)
		if err != nil || res.IsError {
			t.Fatalf("call %d with affinity: %v %+v", i+1, err, res)
		}
	}
	if n := sticky.Stats().Reconnects; n != 0 {
		t.Fatalf("with affinity the 2025 client started %d sessions again; want none", n)
	}

	// The replica that holds the session stops: the balancer sends the
	// session's next request to the other, which answers 404, and the
	// client initializes again there and gets its answer.
	holder := -1
	for deadline := time.Now().Add(20 * time.Second); holder < 0; {
		for i, l := range logs {
			if strings.Contains(l.String(), "method=tools/call era=legacy") {
				holder = i
			}
		}
		if holder < 0 && time.Now().After(deadline) {
			t.Fatalf("no replica logged the 2025 calls:\n%s\n%s", logs[0], logs[1])
		}
		time.Sleep(20 * time.Millisecond) // another process's log
	}
	cmds[holder].Process.Kill()
	cmds[holder].Wait()
	res, err := sticky.CallTool(context.Background(), "echo", map[string]any{"text": "moved"}, nil)
	if err != nil || res.IsError {
		t.Fatalf("a 2025 call once its replica stopped: %v %+v", err, res)
	}
	if n := sticky.Stats().Reconnects; n != 1 {
		t.Fatalf("once its replica stopped the 2025 client started %d sessions again; want one", n)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/internal/interop/gatewaycheck"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/readmetest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/review"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

// mailerEnv names the file a mail server with no idempotency of its own
// writes each message it sends to, one line each: this test binary serves
// as that server (TestMain) when the variable is set. The gateway passes
// it on (it is not one of mcprel's MCPREL_ variables).
const mailerEnv = "CMDTEST_MAILER_SENT"

// serveMailer serves the tools examples/gateway/mail.yaml describes over
// stdio: send_email sends every time it is called (a line in file) and,
// asked to "stall", sends and then never answers (asked for "delayMs",
// sends and answers that long after); send_receipt sends once
// per requestId; list_sent reads the file.
func serveMailer(file string) {
	srv, err := server.New(mcp.Implementation{Name: "mailer", Version: "1"}, &server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	sent := func() []string {
		b, _ := os.ReadFile(file)
		return strings.Fields(string(b))
	}
	record := func(line string) {
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			panic(err)
		}
		fmt.Fprintln(f, line)
		f.Close()
	}
	type mail struct {
		To        string `json:"to"`
		RequestID string `json:"requestId,omitempty"`
		Stall     bool   `json:"stall,omitempty"`
		DelayMs   int    `json:"delayMs,omitempty"`
	}
	server.AddTypedTool(srv, server.Tool{Name: "send_email"}, func(ctx context.Context, call *server.CallRequest, in mail) (string, error) {
		mu.Lock()
		record(in.To)
		mu.Unlock()
		if in.Stall {
			<-ctx.Done()
			return "", ctx.Err()
		}
		if in.DelayMs > 0 {
			select {
			case <-time.After(time.Duration(in.DelayMs) * time.Millisecond): // the point: an answer that comes later
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "sent to " + in.To, nil
	})
	server.AddTypedTool(srv, server.Tool{Name: "send_receipt"}, func(ctx context.Context, call *server.CallRequest, in mail) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, line := range sent() {
			if line == "receipt:"+in.RequestID {
				return "receipt " + in.RequestID, nil
			}
		}
		record("receipt:" + in.RequestID)
		return "receipt " + in.RequestID, nil
	})
	server.AddTypedTool(srv, server.Tool{Name: "purge_mailbox"}, func(ctx context.Context, call *server.CallRequest, in struct{}) (string, error) {
		return "purged", nil
	})
	server.AddTypedTool(srv, server.Tool{Name: "list_sent"}, func(ctx context.Context, call *server.CallRequest, in struct{}) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		return sent(), nil
	})
	stdio.NewConn(srv, os.Stdin, os.Stdout, nil).Serve(context.Background())
}

// startMailGateway runs "mcprel gateway --http" with the example policy
// in front of the mailer, on db.
func startMailGateway(t *testing.T, sentFile, db string) (*exec.Cmd, *client.Client) {
	t.Helper()
	policy, err := filepath.Abs("../../examples/gateway/mail.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return startGatewayWith(t, policy, sentFile, db, nil)
}

// startGatewayWith runs "mcprel gateway --http" with policy in front of
// the mailer, on db, with a client of options o (nil: the defaults).
func startGatewayWith(t *testing.T, policy, sentFile, db string, o *client.Options) (*exec.Cmd, *client.Client) {
	t.Helper()
	url, cmd, _ := startEndpoint(t, []string{mailerEnv + "=" + sentFile}, "gateway", "--http", "127.0.0.1:0",
		"--policy", policy, "--db", db, "--lease", "1s", "--task-lease", "1s",
		"--upstream", "mail="+os.Args[0]+" -test.run=^$")
	c, err := client.DialHTTP(t.Context(), url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return cmd, c
}

func countLines(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(string(b)))
}

// The gateway is killed (SIGKILL) while the upstream holds a keyed
// send_email it already sent: a gateway started again on the same ledger
// never forwards the key again — its retries are in_progress until the
// dead claim's lease runs out, then outcome_unknown naming list_sent —
// "mcprel ledger show" says so, and "mcprel ledger resolve" closes it
// with what an operator found. The example policy's review agrees: the
// tool is CONDITIONAL, at most once, and not production ready.
func TestGatewayKilledMidCallNeverSendsTwice(t *testing.T) {
	dir := t.TempDir()
	sentFile, db := filepath.Join(dir, "sent"), filepath.Join(dir, "gw.db")
	gw, c := startMailGateway(t, sentFile, db)
	stalled := make(chan error, 1)
	go func() {
		_, err := c.CallTool(context.Background(), "send_email", map[string]any{"to": "ops", "requestId": "r-1", "stall": true}, nil)
		stalled <- err
	}()
	for deadline := time.Now().Add(20 * time.Second); countLines(t, sentFile) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the upstream never sent")
		}
		time.Sleep(5 * time.Millisecond) // polling a file another process writes
	}
	gw.Process.Signal(syscall.SIGKILL)
	gw.Wait()
	if err := <-stalled; err == nil {
		t.Fatal("the call whose gateway was killed succeeded")
	}

	_, c2 := startMailGateway(t, sentFile, db)
	args := map[string]any{"to": "ops", "requestId": "r-1", "stall": true}
	var last mcp.Failure
	for deadline := time.Now().Add(20 * time.Second); ; {
		res, err := c2.CallTool(context.Background(), "send_email", args, nil)
		if err != nil {
			t.Fatal(err)
		}
		last = gatewaycheck.Failure(t, res)
		if last.Code == mcp.FailureOutcomeUnknown {
			break
		}
		if last.Code != mcp.FailureInProgress || !last.Retryable || time.Now().After(deadline) {
			t.Fatalf("a retry after the kill = %+v; want in_progress until the lease ends, then outcome_unknown", last)
		}
		time.Sleep(time.Duration(last.RetryAfterMs) * time.Millisecond) // as the answer advises
	}
	if last.Retryable || !strings.Contains(last.Message, "list_sent") || countLines(t, sentFile) != 1 {
		t.Fatalf("outcome_unknown = %+v, %d sent; want not retryable, naming list_sent, sent once", last, countLines(t, sentFile))
	}

	show := exec.Command(binary, "ledger", "show", "--db", db, "--tool", "send_email", "--key", "r-1")
	out, err := show.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"state": "outcome_unknown"`) || !strings.Contains(string(out), "lease expired") {
		t.Fatalf("ledger show: %v\n%s", err, out)
	}
	resolve := exec.Command(binary, "ledger", "resolve", "--db", db, "--tool", "send_email", "--key", "r-1", "--failed", "checked list_sent: it went out; do not resend")
	if out, err := resolve.CombinedOutput(); err != nil || !strings.Contains(string(out), `"state": "committed"`) {
		t.Fatalf("ledger resolve: %v\n%s", err, out)
	}
	res, err := c2.CallTool(context.Background(), "send_email", args, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := gatewaycheck.Failure(t, res); f.Code != mcp.FailureOperationFailed || !strings.Contains(f.Message, "do not resend") || countLines(t, sentFile) != 1 {
		t.Fatalf("after resolve = %+v, %d sent", f, countLines(t, sentFile))
	}
	again := exec.Command(binary, "ledger", "resolve", "--db", db, "--tool", "send_email", "--key", "r-1", "--forget")
	if out, err := again.CombinedOutput(); err == nil || !strings.Contains(string(out), "committed, not of unknown outcome") {
		t.Fatalf("resolving a committed record: %v\n%s", err, out)
	}

	for _, op := range reviewAsGateway(t, "../../examples/gateway/mail.yaml").Operations {
		if op.Name == "send_email" && (op.Retry.Class != review.ClassConditional || op.Verdict == review.ProductionReady) {
			t.Fatalf("the review of send_email: %s, %s", op.Retry.Class, op.Verdict)
		}
	}
}

// The other tools of the example policy behave as its review classes
// them: send_receipt's upstream honours the key, so a retry is forwarded
// and deduplicated there; purge_mailbox has no key and is UNSAFE; a
// send_email without its required key is refused before it is sent.
func TestGatewayMailPolicyAsReviewed(t *testing.T) {
	dir := t.TempDir()
	sentFile := filepath.Join(dir, "sent")
	_, c := startMailGateway(t, sentFile, filepath.Join(dir, "gw.db"))
	for range 2 {
		res, err := c.CallTool(t.Context(), "send_receipt", map[string]any{"to": "ops", "requestId": "rc-1"}, nil)
		if err != nil || res.IsError {
			t.Fatalf("send_receipt: %v %+v", err, res)
		}
	}
	res, err := c.CallTool(t.Context(), "send_email", map[string]any{"to": "ops"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := gatewaycheck.Failure(t, res); f.Code != mcp.FailureKeyRequired || !strings.Contains(f.Message, "arguments.requestId") {
		t.Fatalf("send_email without its key = %+v", f)
	}
	if n := countLines(t, sentFile); n != 1 {
		t.Fatalf("%d sent, want the one receipt", n)
	}
	tools, err := c.ListTools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	classes := map[string]any{}
	for _, tool := range tools {
		classes[tool.Name] = tool.Meta[mcp.MetaRetryClass]
	}
	want := map[string]any{"send_email": "conditional", "send_receipt": "conditional", "purge_mailbox": "unsafe", "list_sent": "safe", "lookup_operation": "safe"}
	for name, class := range want {
		if classes[name] != class {
			t.Errorf("%s is advertised %v, want %v", name, classes[name], class)
		}
	}
	reviewed := map[string]string{}
	for _, op := range reviewAsGateway(t, "../../examples/gateway/mail.yaml").Operations {
		reviewed[op.Name] = strings.ToLower(op.Retry.Class)
	}
	for name, class := range reviewed {
		if classes[name] != class {
			t.Errorf("the review classes %s %s, the gateway advertises %v", name, class, classes[name])
		}
	}
}

// reviewAsGateway is the review of the policy at path as a gateway on
// SQLite over HTTP runs it (mcprel review --gateway).
func reviewAsGateway(t *testing.T, path string) review.Report {
	t.Helper()
	p, err := review.Parse(path, mustRead(t, path))
	if err != nil {
		t.Fatal(err)
	}
	if err := gateway.DefaultFacts.Complete(p); err != nil {
		t.Fatal(err)
	}
	return review.Review(p)
}

// The README's policy for one tool, as written, is the whole policy: the
// gateway it runs claims the key before it forwards, answers a retry from
// the record, and refuses a call without the required key — and "mcprel
// review --gateway" classes it CONDITIONAL, as the gateway runs it.
func TestReadmeGatewayPolicyRunsAsWritten(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(readmetest.Block(t, "yaml", "name: send_email")), 0o600); err != nil {
		t.Fatal(err)
	}
	sentFile := filepath.Join(dir, "sent")
	_, c := startGatewayWith(t, policy, sentFile, filepath.Join(dir, "gw.db"), nil)
	args := map[string]any{"to": "ops", "requestId": "readme-1"}
	first, err := c.CallTool(t.Context(), "send_email", args, nil)
	if err != nil || first.IsError {
		t.Fatalf("send_email: %v %+v", err, first)
	}
	again, err := c.CallTool(t.Context(), "send_email", args, nil)
	if err != nil || again.IsError || again.Meta[mcp.MetaReplayed] != true || countLines(t, sentFile) != 1 {
		t.Fatalf("its retry: %v %+v, %d sent; want it replayed, sent once", err, again, countLines(t, sentFile))
	}
	res, err := c.CallTool(t.Context(), "send_email", map[string]any{"to": "ops"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := gatewaycheck.Failure(t, res); f.Code != mcp.FailureKeyRequired || countLines(t, sentFile) != 1 {
		t.Fatalf("send_email without its key = %+v, %d sent", f, countLines(t, sentFile))
	}
	out, err := exec.Command(binary, "review", "--gateway", policy, "--json").Output()
	var report review.Report
	if jerr := json.Unmarshal(out, &report); jerr != nil || len(report.Operations) != 1 || report.Operations[0].Retry.Class != review.ClassConditional ||
		len(report.Operations[0].Missing) != 0 {
		t.Fatalf("review --gateway: %v %v\n%s", err, jerr, out)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// "mcprel ledger resolve" refuses what it cannot do before it opens the
// database, and exits 3 for a key with no record.
func TestLedgerResolveUsage(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "l.db")
	existing := filepath.Join(dir, "existing.db")
	ledgertest.Open(t, existing, nil, nil, "")
	notResult := filepath.Join(dir, "not-a-result.json")
	if err := os.WriteFile(notResult, []byte(`{"text":"no content array"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--db", db, "--key", "k"}, 2, "--tool and --key are required"},
		{[]string{"--db", db, "--tool", "t", "--key", "k"}, 2, "exactly one of --result FILE, --failed MESSAGE and --forget"},
		{[]string{"--db", db, "--tool", "t", "--key", "k", "--forget", "--failed", "x"}, 2, "exactly one of"},
		{[]string{"--db", db, "--tool", "t", "--key", "k", "--result", notResult}, 2, "is not a tool result"},
		{[]string{"--db", db, "--tool", "t", "--key", "k", "--result", filepath.Join(dir, "missing.json")}, 2, "--result:"},
		{[]string{"--db", db, "--tool", "t", "--key", "k", "--forget", "--lease", "48h"}, 2, "--lease must be positive and no longer than --retention"},
		{[]string{"--db", db, "--tool", "t", "--key", "k", "--forget"}, 1, "no ledger at " + db},
		{[]string{"--db", existing, "--tool", "t", "--key", "k", "--forget"}, 3, "nothing to resolve"},
	} {
		cmd := exec.Command(binary, append([]string{"ledger", "resolve"}, tc.args...)...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("ledger resolve %v: exit %d, %q; want exit %d with %q", tc.args, code, out, tc.code, tc.want)
		}
	}
}

// A keyed send_email made a required task: the gateway is killed while
// the upstream holds the call it already sent. The gateway started again
// on the same store takes the task over and ends it failed, its outcome
// unknown — never sent again — and a retried creation with the key gets
// that same task back.
func TestGatewayKilledMidTaskEndsItUnknown(t *testing.T) {
	dir := t.TempDir()
	sentFile, db := filepath.Join(dir, "sent"), filepath.Join(dir, "gw.db")
	mail := string(mustRead(t, "../../examples/gateway/mail.yaml"))
	// send_email, the first operation, runs only as a task.
	mail = strings.Replace(mail, "      external_effect_guard: at_most_once\n", "      external_effect_guard: at_most_once\n    tasks: {support: required}\n", 1)
	policy := filepath.Join(dir, "tasks.yaml")
	if err := os.WriteFile(policy, []byte(mail), 0o600); err != nil {
		t.Fatal(err)
	}
	withTasks := &client.Options{Capabilities: mcp.ClientCapabilities{Extensions: map[string]json.RawMessage{mcp.ExtensionTasks: json.RawMessage(`{}`)}}}
	gw, c := startGatewayWith(t, policy, sentFile, db, withTasks)
	args := map[string]any{"name": "send_email", "arguments": map[string]any{"to": "ops", "requestId": "task-1", "stall": true}}
	taskOf := func(c *client.Client) string {
		t.Helper()
		raw, err := c.Request(t.Context(), mcp.MethodToolsCall, "send_email", args, nil)
		if err != nil {
			t.Fatal(err)
		}
		var created struct { // 2026-07-28: the task is the result
			ResultType string `json:"resultType"`
			ID         string `json:"taskId"`
		}
		if err := json.Unmarshal(raw, &created); err != nil || created.ResultType != "task" || created.ID == "" {
			t.Fatalf("send_email did not create a task: %s", raw)
		}
		return created.ID
	}
	id := taskOf(c)
	for deadline := time.Now().Add(20 * time.Second); countLines(t, sentFile) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the upstream never sent")
		}
		time.Sleep(5 * time.Millisecond) // polling a file another process writes
	}
	gw.Process.Signal(syscall.SIGKILL)
	gw.Wait()

	_, c2 := startGatewayWith(t, policy, sentFile, db, withTasks)
	var got struct {
		Status        string `json:"status"`
		StatusMessage string `json:"statusMessage"`
	}
	for deadline := time.Now().Add(30 * time.Second); got.Status != "failed"; {
		raw, err := c2.Request(t.Context(), mcp.MethodTasksGet, id, map[string]any{"taskId": id}, nil)
		if err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(raw, &got)
		if got.Status != "working" && got.Status != "failed" || time.Now().After(deadline) {
			t.Fatalf("the task after its gateway was killed: %s", raw)
		}
		time.Sleep(50 * time.Millisecond) // a poll, as a client's
	}
	if !strings.Contains(got.StatusMessage, "outcome unknown") || countLines(t, sentFile) != 1 {
		t.Fatalf("the task ended %+v, %d sent; want failed, outcome unknown, sent once", got, countLines(t, sentFile))
	}
	if again := taskOf(c2); again != id || countLines(t, sentFile) != 1 {
		t.Fatalf("the retried creation got task %s (first %s), %d sent", again, id, countLines(t, sentFile))
	}
}

package ts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/interop/everything"
)

// gatewayTasksSummary is what gateway-tasks-client.mjs reports.
type gatewayTasksSummary struct {
	Errors      []string
	ServerTasks map[string]any
	Execution   map[string]string
	Stream      struct {
		Kinds    []string
		Messages []string
		Created  struct{ TaskID, Status string }
		Result   struct {
			Content []struct{ Text string }
		}
	}
	LongCreated struct{ TaskID string }
	Cancel      struct{ TaskID, Status string }
	AfterCancel struct{ Status string }
}

// Two programs nobody here wrote, with mcprel gateway between them: the
// official TypeScript SDK's task client (1.32.2, 2025-11-25 tasks) and
// the reference server, server-everything, whose simulate-research-query
// runs only as a task of its own. The client sees the tool as one it may
// run as a task (a client that cannot take one gets a call's result),
// streams a task of the gateway's to the server's report, the server's
// stage messages as its status, and cancels another, which ends cancelled
// as the server's does.
func TestTypeScriptTaskClientThroughGateway(t *testing.T) {
	requireNode(t)
	everything.Require(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bin := buildServer(t, ctx)
	upstream := strings.Join(everything.Command(t), " ")
	argv, _ := json.Marshal([]string{bin, "gateway", "--stdio", "--upstream", "everything=" + upstream,
		"--db", filepath.Join(t.TempDir(), "gateway.db"), "--log-level", "warn"})
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "node", "gateway-tasks-client.mjs", string(argv))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gateway-tasks-client.mjs: %v\n%s", err, stderr.String())
	}
	var s gatewayTasksSummary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if len(s.Errors) > 0 {
		t.Fatalf("client errors: %v\n%s", s.Errors, stderr.String())
	}
	if s.ServerTasks["requests"] == nil || s.Execution["taskSupport"] != "optional" {
		t.Errorf("capability %v, simulate-research-query execution %v", s.ServerTasks, s.Execution)
	}
	if s.Stream.Created.TaskID == "" || s.Stream.Kinds[0] != "taskCreated" || s.Stream.Kinds[len(s.Stream.Kinds)-1] != "result" ||
		len(s.Stream.Result.Content) == 0 || !strings.Contains(s.Stream.Result.Content[0].Text, "Research Report: tides") {
		t.Errorf("the task stream: %+v", s.Stream)
	}
	if !slices.ContainsFunc(s.Stream.Messages, func(m string) bool { return strings.HasSuffix(m, "...") }) {
		t.Errorf("the server's stage messages never reached the client: %q", s.Stream.Messages)
	}
	if s.Cancel.TaskID != s.LongCreated.TaskID || s.AfterCancel.Status != "cancelled" {
		t.Errorf("cancel answered %+v, then the task was %q; want it cancelled, as the server's", s.Cancel, s.AfterCancel.Status)
	}
}

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
)

// tasksSummary is what tasks-client.mjs reports.
type tasksSummary struct {
	Errors          []string
	ServerTasks     map[string]any
	ReportExecution map[string]string
	Stream          struct {
		Kinds   []string
		Created struct{ TaskID, Status string }
		Result  struct {
			Meta              map[string]map[string]string `json:"_meta"`
			StructuredContent struct{ Rows int }
		}
	}
	Get        struct{ TaskID, Status string }
	TaskResult struct{ StructuredContent struct{ Rows int } }
	List       struct {
		Tasks []struct{ TaskID string }
	}
	CancelFinished struct{ Code int }
	LongCreated    struct{ TaskID string }
	Cancel         struct{ TaskID, Status, StatusMessage string }
	AfterCancel    struct{ Status string }
	TinyCreated    struct {
		TaskID string
		TTL    *int64
	}
	TinyGet struct {
		TaskID, Status string
		TTL            *int64
	}
}

// The official TypeScript SDK's experimental task client (1.32.2, the
// 2025-11-25 tasks API) against mcprel serve: it sees the capability and
// the tool's task support, streams a task to its result (created, status,
// result with its related-task _meta), reads it with tasks/get,
// tasks/result and tasks/list, is refused (-32602) cancelling a finished
// task, cancels a long one, which its worker then ends cancelled, and
// reads a task that asked for a 1 ms TTL right after creating it.
func TestTypeScriptTaskClient(t *testing.T) {
	requireNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bin := buildServer(t, ctx)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "node", "tasks-client.mjs", bin, filepath.Join(t.TempDir(), "tasks.db"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tasks-client.mjs: %v\n%s", err, stderr.String())
	}
	var s tasksSummary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if len(s.Errors) > 0 {
		t.Fatalf("client errors: %v", s.Errors)
	}
	if s.ServerTasks["requests"] == nil || s.ReportExecution["taskSupport"] != "optional" {
		t.Errorf("capability %v, generate_report execution %v", s.ServerTasks, s.ReportExecution)
	}
	id := s.Stream.Created.TaskID
	if id == "" || s.Stream.Kinds[0] != "taskCreated" || s.Stream.Kinds[len(s.Stream.Kinds)-1] != "result" ||
		s.Stream.Result.StructuredContent.Rows != 5 || s.Stream.Result.Meta["io.modelcontextprotocol/related-task"]["taskId"] != id {
		t.Errorf("the task stream: %+v", s.Stream)
	}
	if s.Get.Status != "completed" || s.TaskResult.StructuredContent.Rows != 5 {
		t.Errorf("tasks/get %+v, tasks/result %+v", s.Get, s.TaskResult)
	}
	if !slices.ContainsFunc(s.List.Tasks, func(x struct{ TaskID string }) bool { return x.TaskID == id }) {
		t.Errorf("tasks/list does not list %s: %+v", id, s.List)
	}
	if s.CancelFinished.Code != -32602 {
		t.Errorf("cancelling a completed task: %+v, want -32602", s.CancelFinished)
	}
	if s.Cancel.TaskID != s.LongCreated.TaskID || s.Cancel.Status != "working" ||
		!strings.Contains(s.Cancel.StatusMessage, "cancellation requested") || s.AfterCancel.Status != "cancelled" {
		t.Errorf("cancel answered %+v, then the task was %q; want working (the intent recorded), then cancelled", s.Cancel, s.AfterCancel.Status)
	}
	// The TTL counts from creation with a floor (docs/tasks.md): the task
	// is there, and both answers report the TTL it really has.
	const minTTL = 60_000
	if s.TinyGet.TaskID != s.TinyCreated.TaskID || s.TinyGet.Status == "" ||
		s.TinyCreated.TTL == nil || *s.TinyCreated.TTL < minTTL || s.TinyGet.TTL == nil || *s.TinyGet.TTL < minTTL {
		t.Errorf("a task asking for ttl 1: created %+v, then tasks/get %+v; want it found, with a ttl of at least %d ms", s.TinyCreated, s.TinyGet, minTTL)
	}
}

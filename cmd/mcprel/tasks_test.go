package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
)

// taskMeta is a 2026-07-28 request's _meta with the tasks extension.
const taskMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`

func reportCall(id, rows, stepMs int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"generate_report","arguments":{"rows":%d,"stepMs":%d},%s}}`, id, rows, stepMs, taskMeta)
}

func taskRequest(id int, method, taskID string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"taskId":%q,%s}}`, id, method, taskID, taskMeta)
}

// taskView is what the tests read of a task.
type taskView struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
	Result        *struct {
		StructuredContent reportResult `json:"structuredContent"`
	} `json:"result"`
}

func parseTask(t *testing.T, line string) taskView {
	t.Helper()
	var msg struct {
		Result *taskView
		Error  json.RawMessage
	}
	if err := json.Unmarshal([]byte(line), &msg); err != nil || msg.Result == nil {
		t.Fatalf("not a task: %s", line)
	}
	return *msg.Result
}

// expectedChecksum is generate_report's checksum of rows rows, however
// many processes worked on it.
func expectedChecksum(rows int) string {
	var sum uint64
	for i := range rows {
		h := fnv.New64a()
		fmt.Fprintf(h, "row %d", i)
		sum += h.Sum64()
	}
	return fmt.Sprintf("%016x", sum)
}

// stdioTask asks a stdio child for a task by id.
func (c *child) task(id int, taskID string) taskView {
	c.t.Helper()
	c.send(taskRequest(id, "tasks/get", taskID))
	line, ok := c.next()
	if !ok {
		c.t.Fatal("the server closed its output")
	}
	return parseTask(c.t, line)
}

// --max-tasks-per-tenant reaches the task store: past it a task is
// refused, and the task already kept is unaffected.
func TestServeMaxTasksPerTenant(t *testing.T) {
	c := startServe(t, "--max-tasks-per-tenant", "1")
	c.send(reportCall(1, 100000, 60000))
	line, _ := c.next()
	if created := parseTask(t, line); created.Status != "working" {
		t.Fatalf("the first task: %s", line)
	}
	c.send(reportCall(2, 1, 0))
	line, _ = c.next()
	if !strings.Contains(line, `"id":2`) || !strings.Contains(line, "MaxTasksPerTenant") {
		t.Fatalf("a second task past --max-tasks-per-tenant 1: %s, want it refused as overloaded", line)
	}
}

// A SIGKILLed process leaves its task working under an expiring lease;
// the next process on the same SQLite file takes it over and, the tool
// being resumable, finishes it from its last checkpoint: never stuck
// working, never a row done twice.
func TestTaskResumesAfterSIGKILL(t *testing.T) {
	db := filepath.Join(t.TempDir(), "tasks.db")
	first := startServe(t, "--db", db, "--task-lease", "1s")
	first.send(reportCall(1, 40, 50))
	line, _ := first.next()
	created := parseTask(t, line)
	if created.Status != "working" || created.TaskID == "" {
		t.Fatalf("create: %s", line)
	}
	deadline := time.Now().Add(20 * time.Second)
	for id := 2; ; id++ {
		got := first.task(id, created.TaskID)
		if strings.HasPrefix(got.StatusMessage, "row ") && got.StatusMessage != "row 1 of 40" && got.StatusMessage != "row 2 of 40" {
			break // a few rows are checkpointed
		}
		if got.Status != "working" || time.Now().After(deadline) {
			t.Fatalf("before the kill: %+v", got)
		}
		time.Sleep(20 * time.Millisecond) // polling a real process, as a client does
	}
	first.cmd.Process.Signal(syscall.SIGKILL)
	first.wait()

	second := startServe(t, "--db", db, "--task-lease", "1s")
	for id := 100; ; id++ {
		got := second.task(id, created.TaskID)
		if got.Status == "completed" {
			res := got.Result.StructuredContent
			if res.Rows != 40 || res.Checksum != expectedChecksum(40) || res.Attempts != 2 {
				t.Fatalf("the resumed report: %+v, want 40 rows, checksum %s, 2 attempts", res, expectedChecksum(40))
			}
			return
		}
		if got.Status != "working" || time.Now().After(deadline.Add(20*time.Second)) {
			t.Fatalf("after the restart: %+v\n%s", got, second.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// httpCall posts one 2026-07-28 request to a replica, with the headers
// its method needs, and returns the response body.
func httpCall(t *testing.T, url, method, name, body string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Mcp-Name", name)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func httpTask(t *testing.T, url, taskID string) taskView {
	t.Helper()
	return parseTask(t, httpCall(t, url, "tasks/get", taskID, taskRequest(1, "tasks/get", taskID)))
}

// waitTask polls a replica until the task leaves working.
func waitTask(t *testing.T, url, taskID string) taskView {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := httpTask(t, url, taskID)
		if got.Status != "working" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still working after 30 s", taskID)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Two replicas on one PostgreSQL database share their tasks: one created
// on A is read and cancelled on B, and A's worker observes the intent;
// when A is killed, B takes A's other task over and finishes it.
func TestReplicasShareTasks(t *testing.T) {
	dsn := storetest.Postgres(t)
	a, cmdA := startHTTP(t, []string{"MCPREL_DB=" + dsn}, "--task-lease", "1s")
	b, _ := startHTTP(t, []string{"MCPREL_DB=" + dsn}, "--task-lease", "1s")

	created := parseTask(t, httpCall(t, a, "tools/call", "generate_report", reportCall(1, 2000, 20)))
	if got := httpTask(t, b, created.TaskID); got.Status != "working" {
		t.Fatalf("the task read on the other replica: %+v", got)
	}
	ack := httpCall(t, b, "tasks/cancel", created.TaskID, taskRequest(2, "tasks/cancel", created.TaskID))
	if !strings.Contains(ack, `"resultType":"complete"`) || strings.Contains(ack, "error") {
		t.Fatalf("cancel on the other replica: %s", ack)
	}
	if got := waitTask(t, a, created.TaskID); got.Status != "cancelled" {
		t.Fatalf("after a cancel on B, A's worker ended the task %+v", got)
	}

	second := parseTask(t, httpCall(t, a, "tools/call", "generate_report", reportCall(3, 30, 50)))
	for {
		if got := httpTask(t, b, second.TaskID); got.StatusMessage != "" {
			break // A's worker has checkpointed
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmdA.Process.Signal(syscall.SIGKILL)
	cmdA.Wait()
	got := waitTask(t, b, second.TaskID)
	if got.Status != "completed" || got.Result.StructuredContent.Attempts != 2 || got.Result.StructuredContent.Checksum != expectedChecksum(30) {
		t.Fatalf("A's task after A died, read on B: %+v", got)
	}

}

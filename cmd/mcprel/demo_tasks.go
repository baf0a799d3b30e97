package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcprel/mcprel/mcp"
)

// taskMetaArg is the _meta of a 2026-07-28 request from a client that
// declared the tasks extension.
func taskMetaArg() string {
	return fmt.Sprintf(`"_meta":{%q:%q,%q:{"extensions":{%q:{}}},%q:{"name":"mcprel-demo","version":%q}}`,
		mcp.MetaProtocolVersion, mcp.Version20260728, mcp.MetaClientCapabilities, mcp.ExtensionTasks, mcp.MetaClientInfo, version)
}

// taskState is what the demo reads of a task frame.
type taskState struct {
	TaskID        string          `json:"taskId"`
	Status        string          `json:"status"`
	StatusMessage string          `json:"statusMessage"`
	Result        json.RawMessage `json:"result"`
}

func (d *demo) taskCall(id int, method, params string) (taskState, error) {
	d.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params))
	f, err := d.until(fmt.Sprint(id))
	if err != nil {
		return taskState{}, err
	}
	var resp struct {
		Result taskState
		Error  *struct{ Message string }
	}
	json.Unmarshal(f.raw, &resp)
	t := resp.Result
	switch {
	case resp.Error != nil:
		fmt.Fprintf(d.w, "   ⇒ error: %s\n", resp.Error.Message)
	case t.Status != "":
		digest := t.Status
		if t.StatusMessage != "" {
			digest += ", " + t.StatusMessage
		}
		if t.Result != nil {
			digest += ", result inlined"
		}
		fmt.Fprintf(d.w, "   ⇒ task %s: %s\n", t.TaskID, digest)
	default:
		fmt.Fprintf(d.w, "   ⇒ acknowledged\n")
	}
	return t, nil
}

func (d *demo) getTask(id int, taskID string) (taskState, error) {
	return d.taskCall(id, "tasks/get", fmt.Sprintf(`{"taskId":%q,%s}`, taskID, taskMetaArg()))
}

// pollTask asks for the task every 300 ms, from id on, until done says
// so, and returns the last state and the next free id.
func (d *demo) pollTask(id int, taskID string, done func(taskState) bool) (taskState, int, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		t, err := d.getTask(id, taskID)
		id++
		if err != nil || done(t) {
			return t, id, err
		}
		if time.Now().After(deadline) {
			return t, id, fmt.Errorf("demo: task %s still %s after 20s", taskID, t.Status)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (d *demo) createReport(id, rows, stepMs int) (taskState, error) {
	return d.taskCall(id, "tools/call", fmt.Sprintf(`{"name":"generate_report","arguments":{"rows":%d,"stepMs":%d},%s}`, rows, stepMs, taskMetaArg()))
}

// tasksScript shows durable tasks: a long job that becomes a task for a
// client that can take one, cancellation as an intent that the worker
// observes at its next row, and a report left running when the process
// exits (resumed by the next one, restartTasks).
func (d *demo) tasksScript() (leftRunning string, err error) {
	d.say("Tasks: generate_report for a client that declared the tasks extension returns a task at once (resultType \"task\")")
	t, err := d.createReport(40, 5, 20)
	if err != nil {
		return "", err
	}
	d.say("Poll tasks/get until it completes: the result is inlined")
	if _, _, err = d.pollTask(41, t.TaskID, func(t taskState) bool { return t.Status != "working" }); err != nil {
		return "", err
	}
	d.say("A long report, then tasks/cancel: acknowledged at once, and the task is still working — cancellation is an intent")
	if t, err = d.createReport(50, 100000, 50); err != nil {
		return "", err
	}
	time.Sleep(120 * time.Millisecond) // let a row or two pass
	if _, err := d.taskCall(51, "tasks/cancel", fmt.Sprintf(`{"taskId":%q,%s}`, t.TaskID, taskMetaArg())); err != nil {
		return "", err
	}
	if _, err := d.getTask(52, t.TaskID); err != nil {
		return "", err
	}
	d.say("…until the worker reaches its next row's checkpoint, observes the intent and ends it cancelled")
	if _, _, err = d.pollTask(53, t.TaskID, func(t taskState) bool { return t.Status != "working" }); err != nil {
		return "", err
	}
	d.say("A report of 60 rows, 50 ms each, left running when this process exits: it stops at a row and is released")
	if t, err = d.createReport(70, 60, 50); err != nil {
		return "", err
	}
	_, _, err = d.pollTask(71, t.TaskID, func(t taskState) bool { return t.StatusMessage != "" })
	return t.TaskID, err
}

// restartTasks runs in the next server process: it takes the released
// report over and resumes it from its last row.
func (d *demo) restartTasks(taskID string) error {
	d.say("The new process took the report over and resumes it from its last saved row (attempts: 2)")
	t, _, err := d.pollTask(80, taskID, func(t taskState) bool { return t.Status != "working" })
	if err != nil {
		return err
	}
	var res struct {
		StructuredContent reportResult `json:"structuredContent"`
	}
	json.Unmarshal(t.Result, &res)
	fmt.Fprintf(d.w, "   ⇒ %s: %d rows, checksum %s, worked on by %d processes\n", t.Status, res.StructuredContent.Rows,
		res.StructuredContent.Checksum, res.StructuredContent.Attempts)
	return nil
}

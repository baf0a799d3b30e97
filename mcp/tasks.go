package mcp

import "encoding/json"

// Task methods and names. In the 2025-11-25 era tasks are part of the core
// protocol (experimental); in the 2026-07-28 era they are the
// io.modelcontextprotocol/tasks extension, which a client declares in
// every request's capabilities and which drops tasks/result and
// tasks/list.
const (
	MethodTasksGet    = "tasks/get"
	MethodTasksCancel = "tasks/cancel"
	MethodTasksUpdate = "tasks/update" // modern
	MethodTasksResult = "tasks/result" // legacy
	MethodTasksList   = "tasks/list"   // legacy

	NotificationTasksStatus = "notifications/tasks/status" // legacy
	NotificationTasks       = "notifications/tasks"        // modern

	// ExtensionTasks is the tasks extension's id, under
	// capabilities.extensions.
	ExtensionTasks = "io.modelcontextprotocol/tasks"
	// MetaRelatedTask, in the _meta of a message tied to a task, is
	// {"taskId": …}.
	MetaRelatedTask = "io.modelcontextprotocol/related-task"

	// ResultTask is the resultType of a 2026-07-28 result that created a
	// task instead of answering.
	ResultTask = "task"
)

// TaskSupport is a tool's execution.taskSupport (2025-11-25): whether a
// client may, or must, call it as a task.
const (
	TaskForbidden = "forbidden"
	TaskOptional  = "optional"
	TaskRequired  = "required"
)

// ToolExecution is a tool's execution member (2025-11-25 tools/list).
type ToolExecution struct {
	TaskSupport string `json:"taskSupport,omitempty"`
}

// TaskMetadata is the 2025-11-25 task member of a request's params: the
// client asks for the request to run as a task, kept for TTL ms.
type TaskMetadata struct {
	TTL *int64 `json:"ttl,omitempty"`
}

// LegacyTask is a task as the 2025-11-25 era shows it (tasks/get, the
// task member of a CreateTaskResult, tasks/list, tasks/cancel).
type LegacyTask struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTL is in milliseconds; it is always present (null for unlimited).
	TTL          *int64 `json:"ttl"`
	PollInterval *int64 `json:"pollInterval,omitempty"`
}

// LegacyTaskResult is the 2025-11-25 answer of tasks/get and tasks/cancel:
// the task's members at the top level of the result.
type LegacyTaskResult struct {
	ResultBase
	LegacyTask
}

// LegacyCreateTaskResult answers a 2025-11-25 request made as a task.
type LegacyCreateTaskResult struct {
	ResultBase
	Task LegacyTask `json:"task"`
}

// ListTasksResult answers a 2025-11-25 tasks/list.
type ListTasksResult struct {
	ResultBase
	Tasks      []LegacyTask `json:"tasks"`
	NextCursor string       `json:"nextCursor,omitempty"`
}

// Task is a task as the 2026-07-28 tasks extension shows it: flat in a
// CreateTaskResult (resultType "task") and in tasks/get's DetailedTask
// (resultType "complete"), whose Result, Error and InputRequests are set
// by status.
type Task struct {
	ResultBase
	TaskID         string `json:"taskId"`
	Status         string `json:"status"`
	StatusMessage  string `json:"statusMessage,omitempty"`
	CreatedAt      string `json:"createdAt"`
	LastUpdatedAt  string `json:"lastUpdatedAt"`
	TTLMs          *int64 `json:"ttlMs"`
	PollIntervalMs *int64 `json:"pollIntervalMs,omitempty"`
	// Result is a completed task's result: what the request would have
	// returned.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is a failed task's JSON-RPC error object.
	Error json.RawMessage `json:"error,omitempty"`
	// InputRequests are an input_required task's outstanding requests.
	InputRequests json.RawMessage `json:"inputRequests,omitempty"`
}

// TaskIDParams are the params of tasks/get, tasks/cancel and
// tasks/result.
type TaskIDParams struct {
	TaskID string `json:"taskId"`
}

// UpdateTaskParams are the params of tasks/update (2026-07-28): answers to
// an input_required task's requests, by their keys.
type UpdateTaskParams struct {
	TaskID         string                     `json:"taskId"`
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
}

// RelatedTask is the value of MetaRelatedTask.
type RelatedTask struct {
	TaskID string `json:"taskId"`
}

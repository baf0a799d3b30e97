package mcptest

import (
	"strings"
	"sync"
	"time"
)

// Lines collects what a process writes (a server's stderr) and tells a
// test when a line shows up, without polling: give it as the process's
// stderr, then Await.
type Lines struct {
	mu      sync.Mutex
	text    strings.Builder
	changed chan struct{}
}

// NewLines returns an empty collector.
func NewLines() *Lines { return &Lines{changed: make(chan struct{})} }

// Write implements io.Writer.
func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.text.Write(p)
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

// Await reports whether s appears within Timeout.
func (l *Lines) Await(s string) bool { return l.AwaitCount(s, 1) }

// AwaitCount reports whether s appears at least n times within Timeout:
// the second time a handler logs that it was cancelled, say.
func (l *Lines) AwaitCount(s string, n int) bool {
	deadline := time.After(Timeout)
	for {
		l.mu.Lock()
		found, ch := strings.Count(l.text.String(), s) >= n, l.changed
		l.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// Count is how many times s appears so far.
func (l *Lines) Count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.text.String(), s)
}

// String returns everything written so far.
func (l *Lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

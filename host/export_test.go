package host

import (
	"context"
	"net/http"
	"time"

	"github.com/mcprel/mcprel/status"
)

// SetStepHook has f told of each shutdown step before it runs, on the
// goroutine that runs it: the tests record the order, and check what
// holds between two steps.
func SetStepHook(rt *Runtime, f func(step string)) { rt.stepHook = f }

// CloseListener closes the endpoint's listener under the HTTP server, as
// a failing network would: the server's Serve fails.
func CloseListener(rt *Runtime) error { return rt.ln.Close() }

// SetUnknownRefresh makes the gauge of unknown outcomes counted every d
// until the test ends.
func SetUnknownRefresh(t interface{ Cleanup(func()) }, d time.Duration) {
	old := unknownRefresh
	unknownRefresh = d
	t.Cleanup(func() { unknownRefresh = old })
}

// StatusPage is the runtime's status page, nil without metrics.
func StatusPage(rt *Runtime) interface {
	HTML() http.Handler
	JSON() http.Handler
} {
	return rt.status
}

// PublishReplica writes rt's upstreams on the replicas' board now, and
// deletes a batch of stale rows, as the board's loop does every 10 s.
func PublishReplica(rt *Runtime) error { return rt.board.tick(context.Background()) }

// SetReplicaUpstreams makes rt write ups as its upstreams on the replicas'
// board. It is called before Run.
func SetReplicaUpstreams(rt *Runtime, ups []status.ReplicaUpstream) {
	rt.board.upstreams = func() []status.ReplicaUpstream { return ups }
}

// MaxReplicaBytes bounds a replica's row of upstreams, as JSON.
const MaxReplicaBytes = maxReplicaBytes

package status_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/status"
)

type replicas struct {
	list []status.Replica
	err  error
}

func (r replicas) Replicas(_ context.Context, limit int) ([]status.Replica, int, error) {
	if r.err != nil {
		return nil, 0, r.err
	}
	return r.list[:min(limit, len(r.list))], len(r.list), nil
}

// The page lists every replica with its upstreams, marks the one that
// answered, and bounds the list of replicas and of each one's upstreams.
func TestReplicas(t *testing.T) {
	var many []status.ReplicaUpstream
	for i := range status.MaxReplicaUpstreams + 7 {
		many = append(many, status.ReplicaUpstream{Name: fmt.Sprintf("u%d", i), State: "connected", Circuit: "closed"})
	}
	list := []status.Replica{
		{Name: "gw-1:42", LastSeen: now.Add(-3 * time.Second), Upstreams: []status.ReplicaUpstream{
			{Name: "files", State: "connected", Circuit: "closed", InFlight: 2},
			{Name: hostile, State: "down", Circuit: "open"},
		}},
		{Name: "gw-2:7", LastSeen: now.Add(-12 * time.Second), Upstreams: many, MoreUpstreams: 3},
		{Name: "serve-1:9", LastSeen: now.Add(-20 * time.Second)},
	}
	for i := range status.MaxReplicas + 5 - len(list) {
		list = append(list, status.Replica{Name: fmt.Sprintf("r%d", i), LastSeen: now.Add(-30 * time.Second)})
	}
	p := status.New(&status.Options{Replica: "gw-1:42", Now: func() time.Time { return now }, Replicas: replicas{list: list}})

	s := p.Snapshot(context.Background())
	r := s.Replicas
	if r == nil || !r.Available || r.Total != status.MaxReplicas+5 || len(r.Replicas) != status.MaxReplicas || r.More != 5 {
		t.Fatalf("replicas: %+v", r)
	}
	first, second := r.Replicas[0], r.Replicas[1]
	if !first.This || second.This || first.AgeSeconds != 3 || len(first.Upstreams) != 2 || first.Upstreams[0].InFlight != 2 {
		t.Errorf("the answering replica: %+v", first)
	}
	if len(second.Upstreams) != status.MaxReplicaUpstreams || second.MoreUpstreams != 7+3 {
		t.Errorf("the replica with many upstreams: %d shown, %d more", len(second.Upstreams), second.MoreUpstreams)
	}

	_, body := get(t, p.HTML(), "/status")
	if strings.Contains(body, "<script") {
		t.Errorf("a hostile name reached the page unescaped")
	}
	for _, want := range []string{`id="replicas"`, "<strong>gw-1:42</strong> (this one)", "gw-2:7", "12s ago",
		"files", "&lt;script&gt;", "… and 10 more upstream(s)", "no upstreams", "… and 5 more replica(s)."} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	_, body = get(t, p.JSON(), "/status.json")
	var got struct {
		Replicas status.ReplicasSection `json:"replicas"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Replicas.Replicas) != status.MaxReplicas || !got.Replicas.Replicas[0].This || got.Replicas.More != 5 {
		t.Errorf("the JSON's replicas: %+v", got.Replicas)
	}
}

// A failing source of replicas shows as unavailable, its error kept out
// of the page.
func TestReplicasUnavailable(t *testing.T) {
	const secret = "pq: password authentication failed for user s3cret"
	p := status.New(&status.Options{Replica: "gw-1:42", Now: func() time.Time { return now },
		Replicas: replicas{err: errors.New(secret)}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	s := p.Snapshot(context.Background())
	if s.Replicas == nil || s.Replicas.Available || s.Replicas.Error != status.Unavailable {
		t.Fatalf("replicas: %+v", s.Replicas)
	}
	for _, h := range []string{"/status", "/status.json"} {
		handler := p.HTML()
		if h == "/status.json" {
			handler = p.JSON()
		}
		if _, body := get(t, handler, h); strings.Contains(body, "s3cret") || !strings.Contains(body, "unavailable") {
			t.Errorf("%s shows the error or not that it is unavailable:\n%s", h, body)
		}
	}
}

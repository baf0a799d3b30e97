package server

import (
	"cmp"
	"maps"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/outbound"
)

// policyMeta is a tool's _meta as tools/list shows it: the tool's own,
// with the reliability policy the server applies added (mcp.MetaRetryClass
// and the rest), for clients and reviewers to plan by.
func (s *Server) policyMeta(own mcp.Meta, p Policy) mcp.Meta {
	meta := make(mcp.Meta, len(own)+6)
	maps.Copy(meta, own)
	d := s.deadlines(p)
	meta[mcp.MetaRetryClass] = p.Retry.String()
	meta[mcp.MetaTimeoutClass] = p.Timeout.String()
	meta[mcp.MetaIdleTimeoutMs] = d.Idle.Milliseconds()
	meta[mcp.MetaMaxTimeoutMs] = d.Max.Milliseconds()
	// The flow control every call of the tool gets, for reviewers: the
	// same for every tool, advertised with each so that tools/list alone
	// says it.
	meta[mcp.MetaProgressIntervalMs] = s.opts.ProgressInterval.Milliseconds()
	meta[mcp.MetaQueueCapacity] = cmp.Or(s.opts.QueueCapacity, outbound.DefaultCapacity)
	return meta
}

// toolsFor is the tool list a session's tools/list shows: the server's,
// with the queue capacity of the session's streams (conn.Config) in
// place of the server's when its transport sized them otherwise (an HTTP
// handler's StreamCapacity). The cached list is shared and never changed:
// a session that differs gets copies of the tools' _meta.
func (s *Server) toolsFor(era mcp.Era, capacity int) []mcp.Tool {
	list := s.listTools(era)
	if capacity <= 0 || capacity == s.opts.QueueCapacity {
		return list
	}
	out := make([]mcp.Tool, len(list))
	for i, t := range list {
		meta := make(mcp.Meta, len(t.Meta))
		maps.Copy(meta, t.Meta)
		meta[mcp.MetaQueueCapacity] = capacity
		t.Meta = meta
		out[i] = t
	}
	return out
}

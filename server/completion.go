package server

import (
	"context"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// CompletionHandler suggests values for a prompt or resource-template
// argument.
type CompletionHandler func(ctx context.Context, req *CompleteRequest) (*mcp.CompleteResult, error)

// SetCompletionHandler installs the handler for completion/complete and
// advertises the completions capability.
func (s *Server) SetCompletionHandler(h CompletionHandler) {
	s.mu.Lock()
	s.completion = h
	s.mu.Unlock()
}

func (ss *session) complete(r *inflight, in *incoming) {
	ss.srv.mu.RLock()
	h := ss.srv.completion
	ss.srv.mu.RUnlock()
	if h == nil {
		r.fail(jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %q (no completions are offered)", r.method))
		return
	}
	var p mcp.CompleteParams
	if !decodeInto(r, in.params, &p) {
		return
	}
	if p.Ref == nil || p.Argument == nil {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.ref and params.argument are required"))
		return
	}
	q, _ := ss.requestInfo(r, in, false, "", nil)
	req := &CompleteRequest{Request: q, Params: p}
	ss.startCall(r, in, ss.srv.completeLane, ss.srv.opts.Standard, func(ctx context.Context) (mcp.Result, error) {
		res, err := h(ctx, req)
		if err == nil && res != nil && res.Completion.Values == nil {
			cp := *res // the handler's value may be shared
			cp.Completion.Values = []string{}
			res = &cp
		}
		return asResult(res, err)
	}, protocolResult)
}

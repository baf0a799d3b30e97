package server

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// PromptHandler renders a prompt.
type PromptHandler func(ctx context.Context, req *PromptRequest) (*mcp.GetPromptResult, error)

type registeredPrompt struct {
	def     mcp.Prompt
	handler PromptHandler
}

// AddPrompt registers a prompt, replacing one with the same name.
func (s *Server) AddPrompt(p mcp.Prompt, h PromptHandler) error {
	if h == nil || p.Name == "" {
		return fmt.Errorf("server: prompt %q needs a name and a handler", p.Name)
	}
	s.mu.Lock()
	s.prompts[p.Name] = &registeredPrompt{def: p, handler: h}
	s.mu.Unlock()
	s.listChanged(kindPrompts)
	return nil
}

// RemovePrompt unregisters a prompt and reports whether it was there.
func (s *Server) RemovePrompt(name string) bool {
	s.mu.Lock()
	_, ok := s.prompts[name]
	delete(s.prompts, name)
	s.mu.Unlock()
	if ok {
		s.listChanged(kindPrompts)
	}
	return ok
}

func (ss *session) listPrompts(r *inflight, in *incoming) {
	if !noCursor(r, in.params) {
		return
	}
	ss.srv.mu.RLock()
	list := make([]mcp.Prompt, 0, len(ss.srv.prompts))
	for _, p := range ss.srv.prompts {
		list = append(list, p.def)
	}
	ss.srv.mu.RUnlock()
	slices.SortFunc(list, func(a, b mcp.Prompt) int { return cmp.Compare(a.Name, b.Name) })
	res := &mcp.ListPromptsResult{Prompts: list}
	if r.era == mcp.Modern {
		res.Cacheable = ss.srv.cacheable()
	}
	r.succeed(res)
}

func (ss *session) getPrompt(r *inflight, in *incoming) {
	var p mcp.GetPromptParams
	if !decodeInto(r, in.params, &p) {
		return
	}
	if p.Name == nil {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params.name is required"))
		return
	}
	ss.srv.mu.RLock()
	rp := ss.srv.prompts[*p.Name]
	ss.srv.mu.RUnlock()
	if rp == nil {
		r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown prompt %q", *p.Name))
		return
	}
	for _, a := range rp.def.Arguments {
		if _, ok := p.Arguments[a.Name]; a.Required && !ok {
			r.fail(jsonrpc.NewError(jsonrpc.CodeInvalidParams, "prompt %q: required argument %q is missing", *p.Name, a.Name))
			return
		}
	}
	promptArgs, _ := json.Marshal(p.Arguments) // a map: keys sorted
	q, ok := ss.requestInfo(r, in, true, *p.Name, promptArgs)
	if !ok {
		return
	}
	req := &PromptRequest{Request: q, Name: *p.Name, Arguments: p.Arguments}
	ss.startCall(r, in, ss.srv.promptLane, ss.srv.opts.Standard, func(ctx context.Context) (mcp.Result, error) {
		return asResult(rp.handler(ctx, req))
	}, protocolResult)
}

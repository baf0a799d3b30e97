package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// requestStateScenario is sep-2322-client-request-state (multi-round-trip
// requests): the suite's server answers some tools with input_required
// results, and judges what the client sends back. The client answers
// with its one OnRequest handler, as a program would; while the first
// call waits between its rounds, another call runs beside it, which
// must carry none of the first one's state.
type requestStateScenario struct {
	mu sync.Mutex
	c  *client.Client
}

func (s *requestStateScenario) options(opts *client.Options) {
	opts.Capabilities.Elicitation = json.RawMessage(`{}`)
	opts.OnRequest = s.answer
}

// answer accepts an elicitation, confirming; but first, while the call
// that asked is between its rounds, it makes an unrelated call on the
// same client.
func (s *requestStateScenario) answer(ctx context.Context, method string, params json.RawMessage) (any, error) {
	if method != mcp.MethodElicit {
		return nil, fmt.Errorf("this client does not serve %s", method)
	}
	s.mu.Lock()
	c := s.c
	s.c = nil // once
	s.mu.Unlock()
	if c != nil {
		if _, err := c.CallTool(ctx, "test_mrtr_unrelated", map[string]any{}, nil); err != nil {
			return nil, err
		}
	}
	return mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirmed": true}}, nil
}

func (s *requestStateScenario) run(ctx context.Context, c *client.Client) error {
	s.mu.Lock()
	s.c = c
	s.mu.Unlock()
	for _, tool := range []string{"test_mrtr_echo_state", "test_mrtr_no_state", "test_mrtr_no_result_type"} {
		res, err := c.CallTool(ctx, tool, map[string]any{}, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", tool, err)
		}
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
	}
	return nil
}

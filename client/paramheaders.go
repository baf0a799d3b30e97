package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// toolHeaders is what the client knows of the tools' x-mcp-header
// annotations (SEP-2243) on one connection, from its last complete
// tools/list: which arguments of a tools/call it mirrors into Mcp-Param-*
// headers over 2026-07-28 HTTP, and which tools it left out of the listing
// because their annotations break the rules. Each complete listing
// replaces it whole, so it holds no more than one listing, which
// Options.MaxListPages and MaxListBytes bound.
type toolHeaders struct {
	mu       sync.Mutex
	params   map[string][]mcp.HeaderParam // every listed tool; nil for none annotated
	excluded map[string]error             // why a tool was left out
}

// mirrorsHeaders reports whether the connection carries Mcp-Param-*
// headers: 2026-07-28 over Streamable HTTP.
func (c *Client) mirrorsHeaders() bool {
	_, isHTTP := c.transport().(*httpTransport)
	return isHTTP && c.era == mcp.Modern
}

// keepTools checks the annotations of a complete listing, remembers them
// for the calls to come, and returns the tools a call may use: a tool
// whose x-mcp-header annotations break the rules is left out (and
// logged), since no header the client sent for it could be trusted.
func (c *Client) keepTools(tools []mcp.Tool) []mcp.Tool {
	if !c.mirrorsHeaders() {
		return tools
	}
	params := make(map[string][]mcp.HeaderParam, len(tools))
	excluded := map[string]error{}
	kept := tools[:0:0]
	for _, t := range tools {
		ps, err := mcp.FindHeaderParams(t.InputSchema)
		if err != nil && len(t.InputSchema) > 0 {
			c.log.Warn("client: leaving a tool out of tools/list: invalid x-mcp-header annotation", "tool", t.Name, "err", err)
			excluded[t.Name] = err
			continue
		}
		params[t.Name] = ps
		kept = append(kept, t)
	}
	c.tools.mu.Lock()
	c.tools.params, c.tools.excluded = params, excluded
	c.tools.mu.Unlock()
	return kept
}

// lookup returns a tool's mirrored parameters, whether the last listing
// named the tool, and the reason the tool was left out, if it was. A tool
// the server added after that listing is one the client has not listed:
// a refusal for its headers is worth a new listing.
func (th *toolHeaders) lookup(name string) ([]mcp.HeaderParam, bool, error) {
	th.mu.Lock()
	defer th.mu.Unlock()
	ps, listed := th.params[name]
	return ps, listed, th.excluded[name]
}

// ExcludedToolError refuses a call to a tool the client left out of its
// listing: its x-mcp-header annotations break the rules (SEP-2243).
type ExcludedToolError struct {
	Tool string
	Err  error
}

func (e *ExcludedToolError) Error() string {
	return fmt.Sprintf("client: tool %q was left out of tools/list: %v", e.Tool, e.Err)
}

func (e *ExcludedToolError) Unwrap() error { return e.Err }

// withParamHeaders sends a tools/call through send, with the arguments as
// JSON (so that the body carries exactly what the headers mirror) and the
// Mcp-Param-* headers that mirror them; on a connection that carries none,
// args go untouched. A tool the client has not listed yet goes without
// headers, which costs nothing when it has no annotated argument; when
// it has one, a server refuses the call for the missing header
// (CodeHeaderMismatch, before anything runs), and the client lists the
// tools and sends the call once more, with its headers.
func (c *Client) withParamHeaders(ctx context.Context, name string, args any, send func(args any, headers [][2]string) (json.RawMessage, error)) (json.RawMessage, error) {
	a, headers, listed, err := c.paramHeaders(name, args)
	if err != nil {
		return nil, err
	}
	raw, err := send(a, headers)
	if listed || err == nil {
		return raw, err
	}
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != mcp.CodeHeaderMismatch {
		return raw, err
	}
	if _, lerr := c.ListTools(ctx); lerr != nil {
		c.log.Debug("client: tools/list after a refused Mcp-Param header failed", "tool", name, "err", lerr)
		return raw, err
	}
	a, headers, listed, lerr := c.paramHeaders(name, args)
	if lerr != nil {
		return nil, lerr
	}
	if !listed || len(headers) == 0 {
		return raw, err
	}
	return send(a, headers)
}

// paramHeaders returns a call's arguments and Mcp-Param-* headers (see
// withParamHeaders), and whether the client's last listing named the tool.
func (c *Client) paramHeaders(name string, args any) (any, [][2]string, bool, error) {
	if !c.mirrorsHeaders() {
		return args, nil, true, nil
	}
	params, listed, excluded := c.tools.lookup(name)
	if excluded != nil {
		return nil, nil, listed, &ExcludedToolError{Tool: name, Err: excluded}
	}
	if len(params) == 0 || args == nil {
		return args, nil, listed, nil
	}
	raw, ok := args.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, nil, listed, fmt.Errorf("client: the arguments of %s could not be encoded: %w", name, err)
		}
		raw = b
	}
	return raw, mcp.ParamHeaders(params, raw), listed, nil
}

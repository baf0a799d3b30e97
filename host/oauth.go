package host

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"

	"github.com/mcprel/mcprel/auth"
	"github.com/mcprel/mcprel/auth/oauth"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// protect makes the endpoint an OAuth protected resource (Options.OAuth):
// its resource server authenticates every listener, and a tool call
// needing scopes (Options.ToolScopes) is refused without them. It runs
// once the listener is bound, when the endpoint's URL, the default
// resource, is known.
func (rt *Runtime) protect(ctx context.Context) error {
	o := &rt.opts
	cfg := *o.OAuth
	cfg.Resource = cmp.Or(cfg.Resource, rt.endpoint)
	cfg.Logger = cmp.Or(cfg.Logger, rt.logger)
	cfg.ExtraScopes = slices.Clone(cfg.ExtraScopes)
	for _, tool := range slices.Sorted(maps.Keys(o.ToolScopes)) {
		for _, s := range o.ToolScopes[tool] {
			if !slices.Contains(cfg.ExtraScopes, s) {
				cfg.ExtraScopes = append(cfg.ExtraScopes, s)
			}
		}
	}
	rs, err := oauth.New(ctx, cfg)
	if err != nil {
		return err
	}
	rt.oauth = rs
	o.HTTP.Authenticator = rs
	if len(o.ToolScopes) > 0 {
		scopes := o.ToolScopes
		o.HTTP.Permit = func(r *http.Request, method string, params json.RawMessage) error {
			if method != mcp.MethodToolsCall {
				return nil
			}
			var name string
			json.Unmarshal(jsonrpc.Member(params, "name"), &name)
			need := scopes[name]
			if len(need) == 0 {
				return nil
			}
			p, _ := auth.FromContext(r.Context())
			return rs.Need(p, need)
		}
	}
	return nil
}

package server

import (
	"encoding/json"
	"fmt"
	"github.com/mcprel/mcprel/server/conn"
	"strings"
)

// headerParam is a tool argument mirrored into an HTTP header
// (conn.HeaderParam): its schema carries "x-mcp-header".
type headerParam = conn.HeaderParam

// HeaderParams returns the header-mirrored arguments of a tool, or nil.
func (ss *session) HeaderParams(tool string) []headerParam {
	if rt := ss.srv.lookupTool(tool); rt != nil {
		return rt.headers
	}
	return nil
}

// findHeaderParams collects the x-mcp-header annotations of an input schema
// and enforces the rules they must follow: a token name, unique among the
// tool's annotations ignoring case, on a string, integer or boolean
// property reachable from the root through properties keys only.
func findHeaderParams(schema json.RawMessage) ([]headerParam, error) {
	var root any
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, err
	}
	var out []headerParam
	seen := map[string]bool{}
	var walk func(node any, path []string, reachable bool) error
	walk = func(node any, path []string, reachable bool) error {
		switch n := node.(type) {
		case map[string]any:
			if name, ok := n["x-mcp-header"]; ok {
				s, _ := name.(string)
				typ, _ := n["type"].(string)
				switch {
				case !reachable || len(path) == 0:
					return fmt.Errorf("x-mcp-header %q: only properties reachable from the root through \"properties\" may be mirrored", s)
				case !isToken(s):
					return fmt.Errorf("x-mcp-header %q is not a valid header name token", s)
				case seen[strings.ToLower(s)]:
					return fmt.Errorf("x-mcp-header %q is used twice", s)
				case typ != "string" && typ != "integer" && typ != "boolean":
					return fmt.Errorf("x-mcp-header %q: only string, integer and boolean properties may be mirrored", s)
				}
				seen[strings.ToLower(s)] = true
				out = append(out, headerParam{Name: s, Path: append([]string(nil), path...), Type: typ})
			}
			for k, v := range n {
				if k == "properties" {
					if props, ok := v.(map[string]any); ok {
						for name, sub := range props {
							if err := walk(sub, append(path, name), reachable); err != nil {
								return err
							}
						}
					}
					continue
				}
				// Anything under another keyword is not statically reachable.
				if err := walk(v, path, false); err != nil {
					return err
				}
			}
		case []any:
			for _, v := range n {
				if err := walk(v, path, false); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(root, nil, true); err != nil {
		return nil, err
	}
	return out, nil
}

// isToken reports whether s is an HTTP field-name token (RFC 9110 tchar+).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

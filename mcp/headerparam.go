package mcp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// HeaderParam is a tool argument mirrored into an HTTP header on the
// Streamable HTTP transport (2026-07-28): its schema carries
// "x-mcp-header": Name, and a client sends the argument's value as
// Mcp-Param-{Name} so that intermediaries can route on it without parsing
// the body. The server checks that the header matches the body. Client and
// server read the annotation and encode the value with the functions here,
// so that neither can drift from the other.
type HeaderParam struct {
	Name string   // the header is Mcp-Param-{Name}
	Path []string // the chain of properties keys leading to the argument
	Type string   // "string", "integer" or "boolean"
}

// Value returns the argument's value as its header text (before
// EncodeHeaderValue), and whether the arguments hold a non-null value at
// the parameter's path.
func (p HeaderParam) Value(args json.RawMessage) (string, bool) {
	var v any
	if json.Unmarshal(args, &v) != nil {
		return "", false
	}
	return p.valueIn(v)
}

// valueIn is Value on arguments already decoded.
func (p HeaderParam) valueIn(v any) (string, bool) {
	for _, k := range p.Path {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = m[k]; !ok {
			return "", false
		}
	}
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		if x {
			return "true", true
		}
		return "false", true
	case float64:
		if x == float64(int64(x)) {
			return fmt.Sprintf("%d", int64(x)), true
		}
		return fmt.Sprint(x), true
	}
	return "", false
}

// ParamHeaders returns the Mcp-Param-* headers a tools/call with args
// carries, as header name and encoded value pairs in the order of params:
// one for each parameter whose argument has a value (a null or absent
// argument has no header), and none for any other argument.
func ParamHeaders(params []HeaderParam, args json.RawMessage) [][2]string {
	if len(params) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(args, &v) != nil {
		return nil
	}
	var out [][2]string
	for _, p := range params {
		if s, ok := p.valueIn(v); ok {
			out = append(out, [2]string{HeaderParamPrefix + p.Name, EncodeHeaderValue(s)})
		}
	}
	return out
}

// base64 sentinel of a header value that is not safe header text.
const (
	base64Open  = "=?base64?"
	base64Close = "?="
)

// EncodeHeaderValue returns s as the text of a routing header: as it is
// when it is safe header text, otherwise as =?base64?{base64 of its UTF-8
// bytes}?=. Not safe are non-ASCII bytes, control characters (tab
// included), leading or trailing space, and a value that itself reads as
// the base64 form — which would otherwise decode to something else.
func EncodeHeaderValue(s string) string {
	plain := !strings.HasPrefix(s, " ") && !strings.HasSuffix(s, " ") && !looksEncoded(s)
	for i := 0; plain && i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			plain = false
		}
	}
	if plain {
		return s
	}
	return base64Open + base64.StdEncoding.EncodeToString([]byte(s)) + base64Close
}

// DecodeHeaderValue reads a routing header's text, decoding the
// =?base64?…?= form. A plain value must be visible ASCII, spaces and
// tabs; false means a malformed value.
func DecodeHeaderValue(v string) (string, bool) {
	if looksEncoded(v) {
		dec, err := base64.StdEncoding.Strict().DecodeString(v[len(base64Open) : len(v)-len(base64Close)])
		if err != nil {
			return "", false
		}
		return string(dec), true
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c != '\t' && (c < 0x20 || c > 0x7e) {
			return "", false
		}
	}
	return v, true
}

func looksEncoded(v string) bool {
	return strings.HasPrefix(v, base64Open) && strings.HasSuffix(v, base64Close) && len(v) >= len(base64Open)+len(base64Close)
}

// FindHeaderParams collects the x-mcp-header annotations of an input
// schema and enforces the rules they must follow: a token name, unique
// among the tool's annotations ignoring case, on a string, integer or
// boolean property reachable from the root through properties keys only.
// A server refuses to register a tool that breaks them; a client leaves
// such a tool out of its listing (it could not call it correctly).
func FindHeaderParams(schema json.RawMessage) ([]HeaderParam, error) {
	var root any
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, err
	}
	var out []HeaderParam
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
				out = append(out, HeaderParam{Name: s, Path: append([]string(nil), path...), Type: typ})
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

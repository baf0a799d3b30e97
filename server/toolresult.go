package server

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// appendToolResponse appends the response carrying a tools/call result,
// byte for byte what json.Marshal of res inside jsonrpc.AppendResult
// writes (in the modern era, with resultType and serverInfo in front, as
// encodeModern writes them), without reflection for what nearly every
// result is made of: text blocks, blocks kept as raw JSON (a gateway's,
// mcp.PassThrough), raw structuredContent. Raw JSON is checked and
// compacted by a plain loop each, where json.Marshal runs its scanner
// over it twice. Anything else in res (another kind of block, a
// structuredContent value, _meta) is encoded by json.Marshal on its own
// and spliced in, which writes the bytes it would have written in place.
// ok is false when the response is left to the reflective path: a modern
// result with a resultType or _meta of its own (which modernize copies),
// or one json.Marshal would refuse (then refused there, as before).
func (s *Server) appendToolResponse(b []byte, era mcp.Era, id jsonrpc.ID, res *mcp.CallToolResult) (_ []byte, ok bool) {
	modern := era == mcp.Modern
	if modern && (res.ResultType != "" || len(res.Meta) > 0) {
		return nil, false
	}
	size := 64
	for _, c := range res.Content {
		switch c := c.(type) {
		case mcp.RawContent:
			size += len(c) + 1
		case *mcp.TextContent:
			if c != nil {
				size += len(c.Text) + 24
			}
		default:
			size += 64
		}
	}
	if raw, isRaw := res.StructuredContent.(json.RawMessage); isRaw {
		size += len(raw) + 21
	}
	if modern {
		size += len(s.modernHead)
	}
	if cap(b)-len(b) < size {
		b = append(make([]byte, 0, len(b)+size), b...)
	}
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = id.AppendJSON(b)
	b = append(b, `,"result":`...)
	if modern {
		b = append(b, s.modernHead...)
		b = append(b, ',')
	} else {
		b = append(b, '{')
		if len(res.Meta) > 0 {
			meta, err := json.Marshal(res.Meta)
			if err != nil {
				return nil, false
			}
			b = append(b, `"_meta":`...)
			b = append(b, meta...)
			b = append(b, ',')
		}
		if res.ResultType != "" {
			b = append(b, `"resultType":`...)
			b = appendJSONString(b, res.ResultType)
			b = append(b, ',')
		}
	}
	b = append(b, `"content":`...)
	if res.Content == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, c := range res.Content {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendContent(b, c); !ok {
				return nil, false
			}
		}
		b = append(b, ']')
	}
	if sc := res.StructuredContent; sc != nil {
		b = append(b, `,"structuredContent":`...)
		if raw, isRaw := sc.(json.RawMessage); isRaw && len(raw) > 0 {
			if !jsonrpc.Valid(raw) {
				return nil, false
			}
			b = appendCompact(b, raw)
		} else {
			data, err := json.Marshal(sc)
			if err != nil {
				return nil, false
			}
			b = append(b, data...)
		}
	}
	if res.IsError {
		b = append(b, `,"isError":true`...)
	}
	return append(b, "}}"...), true
}

// appendContent appends one content block as json.Marshal writes it.
func appendContent(b []byte, c mcp.Content) ([]byte, bool) {
	switch c := c.(type) {
	case mcp.RawContent:
		if len(c) == 0 {
			return append(b, "null"...), true // what its MarshalJSON says
		}
		if !jsonrpc.Valid(c) {
			return nil, false
		}
		return appendCompact(b, c), true
	case *mcp.TextContent:
		if c != nil && c.Annotations == nil && len(c.Meta) == 0 {
			b = append(b, `{"type":"text","text":`...)
			b = appendJSONString(b, c.Text)
			return append(b, '}'), true
		}
	}
	data, err := json.Marshal(c)
	if err != nil {
		return nil, false
	}
	return append(b, data...), true
}

// appendCompact appends src, which must be valid JSON, as json.Marshal
// writes what a MarshalJSON method returned: without the whitespace
// between tokens, and with <, >, & and U+2028, U+2029 in strings escaped
// as \u003c, \u003e, \u0026, \u2028, \u2029. What needs neither is
// appended in runs as it is.
func appendCompact(dst, src []byte) []byte {
	start := 0
	inString := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		if !inString {
			switch c {
			case '"':
				inString = true
			case ' ', '\t', '\n', '\r':
				dst = append(dst, src[start:i]...)
				start = i + 1
			}
			continue
		}
		switch {
		case c == '\\':
			i++ // the escaped byte is one of "\/bfnrtu: nothing to change
		case c == '"':
			inString = false
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8:
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[src[i+2]&0xF])
			i += 2
			start = i + 1
		}
	}
	return append(dst, src[start:]...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string exactly as json.Marshal
// writes it: HTML's <, > and & escaped, control characters as \n, \r, \t,
// \b, \f or \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

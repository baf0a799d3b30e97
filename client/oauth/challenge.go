package oauth

import "strings"

// challenge is one challenge of a WWW-Authenticate header (RFC 9110
// section 11.6.1): a scheme and its parameters, names lowercased.
type challenge struct {
	scheme  string
	token68 string
	params  map[string]string
}

// parseChallenges parses every challenge in the values of every
// WWW-Authenticate header: several challenges to a header, commas and
// escaped quotes inside quoted strings, scheme and parameter names in any
// case. It never fails; what it cannot parse it skips.
func parseChallenges(headers []string) []challenge {
	var out []challenge
	for _, h := range headers {
		p := &lexer{s: h}
		for {
			p.skip(", \t")
			if p.done() {
				break
			}
			scheme := p.token()
			if scheme == "" {
				p.i++ // not a token character: skip it
				continue
			}
			c := challenge{scheme: strings.ToLower(scheme), params: map[string]string{}}
			p.skip(" \t")
			if t, ok := p.token68(); ok {
				c.token68 = t
			} else {
				p.params(c.params)
			}
			out = append(out, c)
		}
	}
	return out
}

// bearer is the first Bearer challenge in headers, or nil.
func bearer(headers []string) map[string]string {
	for _, c := range parseChallenges(headers) {
		if c.scheme == "bearer" {
			return c.params
		}
	}
	return nil
}

type lexer struct {
	s string
	i int
}

func (p *lexer) done() bool { return p.i >= len(p.s) }

func (p *lexer) skip(set string) {
	for p.i < len(p.s) && strings.IndexByte(set, p.s[p.i]) >= 0 {
		p.i++
	}
}

// tchar is RFC 9110's token character.
func tchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *lexer) token() string {
	start := p.i
	for p.i < len(p.s) && tchar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// token68 reads a token68 when one is what follows the scheme: its
// characters and trailing equals signs, then the end or a comma.
func (p *lexer) token68() (string, bool) {
	j := p.i
	for j < len(p.s) && (tchar(p.s[j]) && strings.IndexByte("!#$%&'*^`|", p.s[j]) < 0 || p.s[j] == '/') {
		j++
	}
	if j == p.i {
		return "", false
	}
	for j < len(p.s) && p.s[j] == '=' {
		j++
	}
	k := j
	for k < len(p.s) && (p.s[k] == ' ' || p.s[k] == '\t') {
		k++
	}
	if k < len(p.s) && p.s[k] != ',' {
		return "", false
	}
	t := p.s[p.i:j]
	p.i = k
	return t, true
}

// params reads name=value pairs separated by commas until what follows is
// not one, which is then the next challenge's scheme. The first of a
// repeated name wins.
func (p *lexer) params(into map[string]string) {
	for {
		save := p.i
		p.skip(", \t")
		name := p.token()
		p.skip(" \t")
		if name == "" || p.done() || p.s[p.i] != '=' {
			p.i = save
			return
		}
		p.i++
		p.skip(" \t")
		var v string
		if !p.done() && p.s[p.i] == '"' {
			v = p.quoted()
		} else {
			v = p.token()
		}
		name = strings.ToLower(name)
		if _, dup := into[name]; !dup {
			into[name] = v
		}
	}
}

// quoted reads a quoted string, undoing backslash escapes; an
// unterminated one runs to the end.
func (p *lexer) quoted() string {
	p.i++ // the opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\' && p.i < len(p.s):
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String()
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

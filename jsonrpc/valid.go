package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// Valid reports whether b is exactly one JSON value, surrounded by nothing
// but whitespace: what encoding/json's Valid reports, byte for byte the
// same grammar (strings may hold any byte but a control character, as
// there, invalid UTF-8 included; nesting deeper than 10000 is refused, as
// there). It is a plain loop over the bytes rather than encoding/json's
// scanner, which calls a state function for every byte: every frame a
// transport reads is checked once, so the check is a good part of what
// decoding a message costs.
func Valid(b []byte) bool {
	i := validValue(b, skipSpace(b, 0), 0)
	return i >= 0 && skipSpace(b, i) == len(b)
}

// maxValidDepth is encoding/json's limit on nesting.
const maxValidDepth = 10000

// validValue returns the index just past the valid value starting at
// b[i], or -1.
func validValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; c {
	case '"':
		return validString(b, i)
	case '{':
		if depth++; depth > maxValidDepth {
			return -1
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			if i = validString(b, i); i < 0 {
				return -1
			}
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return -1
			}
			if i = validValue(b, skipSpace(b, i+1), depth); i < 0 {
				return -1
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case '}':
				return i + 1
			default:
				return -1
			}
		}
	case '[':
		if depth++; depth > maxValidDepth {
			return -1
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1
		}
		for {
			if i = validValue(b, i, depth); i < 0 {
				return -1
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case ']':
				return i + 1
			default:
				return -1
			}
		}
	case 't':
		return validLiteral(b, i, "true")
	case 'f':
		return validLiteral(b, i, "false")
	case 'n':
		return validLiteral(b, i, "null")
	}
	return validNumber(b, i)
}

func validLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// validString returns the index just past the valid string starting at
// b[i] (a quote), or -1.
func validString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		for j < len(b) && plain[b[j]] {
			j++
		}
		if j >= len(b) {
			break
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1
		case c < 0x20:
			return -1
		case c == '\\':
			j++
			if j >= len(b) {
				return -1
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-j <= 4 || !isHex(b[j+1]) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) {
					return -1
				}
				j += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// plain says which bytes a string holds as they are: all but a quote, a
// backslash and the control characters.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// validNumber returns the index just past the valid number starting at
// b[i], or -1: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// ErrInvalidJSON is what ValidMembers reports for bytes that are not
// valid JSON.
var ErrInvalidJSON = errors.New("not valid JSON")

// ValidMembers is Members for bytes not yet known to be JSON: it checks
// obj as Valid does in the same pass that splits it, so that bytes which
// arrive unchecked are read once rather than checked and then split. It
// calls fn with each member as Members does, until fn returns false; it
// checks the rest of obj all the same. It returns ErrInvalidJSON when obj
// is not valid JSON, whatever fn was given, and Members' error when obj is
// valid JSON but not an object.
func ValidMembers(obj []byte, fn func(key, value []byte) bool) error {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		if Valid(obj) {
			return errNotObject
		}
		return ErrInvalidJSON
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return validTail(obj, i+1)
	}
	calling := true
	for {
		if i >= len(obj) || obj[i] != '"' {
			return ErrInvalidJSON
		}
		ks, end := i, validString(obj, i)
		if end < 0 {
			return ErrInvalidJSON
		}
		key := obj[ks+1 : end-1]
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return ErrInvalidJSON
		}
		i = skipSpace(obj, i+1)
		vend := validValue(obj, i, 1)
		if vend < 0 {
			return ErrInvalidJSON
		}
		if calling {
			if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
				// As encoding/json reads it: escapes resolved, invalid
				// UTF-8 replaced.
				var k string
				if err := json.Unmarshal(obj[ks:end], &k); err != nil {
					return err
				}
				key = []byte(k)
			}
			calling = fn(key, obj[i:vend])
		}
		i = skipSpace(obj, vend)
		if i >= len(obj) {
			return ErrInvalidJSON
		}
		switch obj[i] {
		case ',':
			i = skipSpace(obj, i+1)
		case '}':
			return validTail(obj, i+1)
		default:
			return ErrInvalidJSON
		}
	}
}

// validTail checks that nothing but whitespace follows obj's value, which
// ends at i.
func validTail(obj []byte, i int) error {
	if skipSpace(obj, i) != len(obj) {
		return ErrInvalidJSON
	}
	return nil
}
